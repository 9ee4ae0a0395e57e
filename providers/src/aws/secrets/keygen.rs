//! SSH key pairs made in-process (RustCrypto's `ssh-key`), in OpenSSH formats.

use ssh_key::private::{Ed25519Keypair, KeypairData, RsaKeypair};
use ssh_key::rand_core::OsRng;
use ssh_key::{LineEnding, PrivateKey};

use crate::contract::ProviderError;

/// The key types `generate` accepts.
pub(crate) const KINDS: [&str; 2] = ["ssh-ed25519", "ssh-rsa-4096"];

/// A key pair: the private key (for the secret only) and the public key.
pub(crate) struct KeyPair {
    /// The private key in OpenSSH PEM format; never leaves Secrets Manager.
    pub private: zeroize::Zeroizing<String>,
    /// The public key as an `authorized_keys` line.
    pub public: String,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("private", &"(redacted)")
            .field("public", &self.public)
            .finish()
    }
}

/// Makes a key pair of `kind` (one of [`KINDS`]) commented `comment`. RSA
/// key generation is slow: call this off the async threads.
pub(crate) fn generate(kind: &str, comment: &str) -> Result<KeyPair, ProviderError> {
    let data = match kind {
        "ssh-ed25519" => KeypairData::from(Ed25519Keypair::random(&mut OsRng)),
        "ssh-rsa-4096" => KeypairData::from(
            RsaKeypair::random(&mut OsRng, 4096)
                .map_err(|e| ProviderError::fatal(format!("could not make an RSA key: {e}")))?,
        ),
        other => {
            return Err(ProviderError::bad_input(format!(
                "`generate` must be one of {}, not {other:?}",
                KINDS.join(", ")
            )));
        }
    };
    let key = PrivateKey::new(data, comment)
        .map_err(|e| ProviderError::fatal(format!("could not make an SSH key: {e}")))?;
    pair(&key)
}

/// The public key of a private key in OpenSSH format.
pub(crate) fn public_of(private_openssh: &str) -> Result<String, ProviderError> {
    let key = PrivateKey::from_openssh(private_openssh).map_err(|e| {
        ProviderError::fatal(format!(
            "the secret does not hold an OpenSSH private key: {e}"
        ))
    })?;
    Ok(pair(&key)?.public)
}

/// Both halves of `key` in OpenSSH formats.
fn pair(key: &PrivateKey) -> Result<KeyPair, ProviderError> {
    let private = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| ProviderError::fatal(format!("could not encode the SSH key: {e}")))?;
    crate::sensitive::mark(&private);
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| ProviderError::fatal(format!("could not encode the SSH public key: {e}")))?;
    Ok(KeyPair { private, public })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ed25519_pairs_round_trip() {
        let pair = generate("ssh-ed25519", "flow:ssh").unwrap();
        assert!(
            pair.private
                .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
        );
        assert!(pair.public.starts_with("ssh-ed25519 "), "{}", pair.public);
        assert!(pair.public.ends_with(" flow:ssh"));
        assert_eq!(public_of(&pair.private).unwrap(), pair.public);
        assert_ne!(generate("ssh-ed25519", "x").unwrap().public, pair.public);
    }

    #[test]
    fn unknown_kinds_and_bad_keys_fail() {
        assert!(
            generate("ssh-dss", "x")
                .unwrap_err()
                .message
                .contains("must be one of")
        );
        assert!(public_of("not a key").is_err());
    }

    /// Runs in seconds because the bignum crates are optimised in the dev
    /// profile (the workspace Cargo.toml); unoptimised it took 74 s.
    #[test]
    fn rsa_pairs_are_4096_bits() {
        let pair = generate("ssh-rsa-4096", "x").unwrap();
        assert!(pair.public.starts_with("ssh-rsa "));
        // 4096-bit modulus: the base64 blob is about 716 characters.
        assert!(pair.public.len() > 700, "{}", pair.public.len());
    }
}
