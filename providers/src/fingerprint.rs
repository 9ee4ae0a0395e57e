//! Keyed fingerprints of secret values: HMAC-SHA-256 under a key that lives
//! in the user's config folder (`fingerprint.key`, mode 0600), never in
//! state, its backups or plan files. State keeps a sensitive value only as
//! its fingerprint, so that a changed secret still plans as a change; with
//! the key elsewhere, a copy of the state does not let anyone test guesses
//! of a short token against it.
//!
//! Every fingerprint names the key it was made with (the first 8 hex digits
//! of the key's own HMAC of a fixed text), so a plan can tell "this secret
//! changed" from "this was fingerprinted with another key" (a teammate's,
//! on a shared state: the team shares one key file, see docs/state.md).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The key file's name inside the config folder.
pub const KEY_FILE: &str = "fingerprint.key";

/// The variable that names the config folder instead of
/// `$XDG_CONFIG_HOME/flow` or `~/.config/flow`.
pub const CONFIG_DIR_ENV: &str = "FLOW_CONFIG_DIR";

/// What a fingerprint of a sealed input starts with.
pub const SEALED_HMAC_PREFIX: &str = "sealed:hmac-sha256:";

/// What a fingerprint of a sensitive output or saved variable starts with.
pub const HMAC_PREFIX: &str = "hmac-sha256:";

/// A fingerprint key.
#[derive(Clone)]
pub struct FingerprintKey {
    bytes: [u8; 32],
    /// [`FingerprintKey::id`], worked out once.
    id: String,
}

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FingerprintKey({})", self.id())
    }
}

impl FingerprintKey {
    /// A key made of these bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        let id = mac(&bytes, b"flow fingerprint key id")[..8].to_string();
        FingerprintKey { bytes, id }
    }

    /// A new random key.
    pub fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; 32];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        Ok(FingerprintKey::from_bytes(bytes))
    }

    /// The key's name in fingerprints: 8 hex digits (the key's HMAC of a
    /// fixed text) that say which key it is and nothing about it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `hmac-sha256:<key id>:<64 hex>` of `data`.
    pub fn fingerprint(&self, data: &[u8]) -> String {
        format!("{HMAC_PREFIX}{}:{}", self.id, mac(&self.bytes, data))
    }

    /// `sealed:hmac-sha256:<key id>:<64 hex>` of `data`: how state keeps a
    /// sensitive input (see [`crate::is_sealed`]).
    pub fn seal(&self, data: &[u8]) -> String {
        format!("sealed:{}", self.fingerprint(data))
    }
}

/// HMAC-SHA-256 of `data` under `key`, hex.
fn mac(key: &[u8], data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

/// The key id a fingerprint (sealed or not) names, if it is one of ours.
pub fn key_id_of(fingerprint: &str) -> Option<&str> {
    let rest = fingerprint
        .strip_prefix("sealed:")
        .unwrap_or(fingerprint)
        .strip_prefix(HMAC_PREFIX)?;
    let (id, mac) = rest.split_once(':')?;
    (id.len() == 8 && is_hex(id) && mac.len() == 64 && is_hex(mac)).then_some(id)
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The key every fingerprint of this process is made with.
static KEY: OnceLock<FingerprintKey> = OnceLock::new();

/// Makes `key` the process's key. The first call wins; later ones (and
/// [`current`] before any) keep the key already there.
pub fn install(key: FingerprintKey) {
    let _ = KEY.set(key);
}

/// The process's key: the one [`install`]ed, else a random one made now
/// (for tests and tools that keep nothing across runs).
pub fn current() -> &'static FingerprintKey {
    KEY.get_or_init(|| FingerprintKey::generate().expect("/dev/urandom is readable"))
}

/// The config folder: `$FLOW_CONFIG_DIR`, else `$XDG_CONFIG_HOME/flow`,
/// else `$HOME/.config/flow`.
pub fn config_dir() -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = set(CONFIG_DIR_ENV) {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = set("XDG_CONFIG_HOME") {
        return Some(PathBuf::from(dir).join("flow"));
    }
    set("HOME").map(|home| PathBuf::from(home).join(".config/flow"))
}

/// Why the key could not be had.
#[derive(Debug)]
pub struct KeyError {
    /// What went wrong, naming the file.
    pub message: String,
    /// What to do.
    pub help: String,
}

/// Reads the key in `dir`, creating the folder (0700) and a new random key
/// (0600) when there is none. A key file others can read, or one that is
/// not 64 hex digits, is refused.
pub fn load_or_create(dir: &Path) -> Result<FingerprintKey, KeyError> {
    let path = dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => read_key(&path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(dir, &path),
        Err(e) => Err(KeyError {
            message: format!("could not read the fingerprint key {}: {e}", path.display()),
            help: format!("make it readable by you, or point {CONFIG_DIR_ENV} at another folder"),
        }),
    }
}

fn read_key(path: &Path, text: &str) -> Result<FingerprintKey, KeyError> {
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    if mode & 0o077 != 0 {
        return Err(KeyError {
            message: format!(
                "the fingerprint key {} is readable by others (mode {mode:03o})",
                path.display()
            ),
            help: format!("make it private: chmod 600 {}", path.display()),
        });
    }
    let bytes = hex::decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok());
    bytes.map(FingerprintKey::from_bytes).ok_or_else(|| KeyError {
        message: format!(
            "the fingerprint key {} is not 64 hex digits",
            path.display()
        ),
        help: "restore the file from where your team keeps it; a new key (delete the file) makes every sensitive input plan as changed once".into(),
    })
}

fn create(dir: &Path, path: &Path) -> Result<FingerprintKey, KeyError> {
    let failed = |e: std::io::Error| KeyError {
        message: format!(
            "could not create the fingerprint key {}: {e}",
            path.display()
        ),
        help: format!(
            "make {} writable, or point {CONFIG_DIR_ENV} at a folder that is",
            dir.display()
        ),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let key = FingerprintKey::generate().map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match file {
        Ok(mut file) => {
            writeln!(file, "{}", hex::encode(key.bytes)).map_err(failed)?;
            file.sync_all().map_err(failed)?;
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(key)
        }
        // Another flow made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path).map_err(failed)?;
            read_key(path, &text)
        }
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_keyed_and_name_their_key() {
        let a = FingerprintKey::from_bytes([1; 32]);
        let b = FingerprintKey::from_bytes([2; 32]);
        assert_eq!(a.fingerprint(b"hunter22"), a.fingerprint(b"hunter22"));
        assert_ne!(a.fingerprint(b"hunter22"), b.fingerprint(b"hunter22"));
        assert_ne!(a.id(), b.id());
        let seal = a.seal(b"hunter22");
        assert_eq!(key_id_of(&seal), Some(a.id()));
        assert_eq!(key_id_of(&a.fingerprint(b"x")), Some(a.id()));
        assert_eq!(key_id_of("sha256:abcd"), None);
        assert!(!seal.contains("hunter22"));
    }

    /// RFC 4231 test case 2: the HMAC is the standard one.
    #[test]
    fn hmac_is_rfc_4231() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_key_is_made_once_private_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("conf/flow");
        let made = load_or_create(&dir).unwrap();
        let path = dir.join(KEY_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let again = load_or_create(&dir).unwrap();
        assert_eq!(made.fingerprint(b"v"), again.fingerprint(b"v"));
    }

    #[test]
    fn a_key_others_can_read_or_a_garbled_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        load_or_create(tmp.path()).unwrap();
        let path = tmp.path().join(KEY_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = load_or_create(tmp.path()).unwrap_err();
        assert!(
            open.message.contains("readable by others (mode 644)"),
            "{}",
            open.message
        );
        assert!(open.help.contains("chmod 600"), "{}", open.help);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "not hex\n").unwrap();
        let garbled = load_or_create(tmp.path()).unwrap_err();
        assert!(
            garbled.message.contains("not 64 hex digits"),
            "{}",
            garbled.message
        );
    }
}
