//! The bearer token an EKS cluster accepts: `k8s-aws-v1.` and the base64url
//! (unpadded) of a presigned STS `GetCallerIdentity` URL that signs the
//! header `x-k8s-aws-id: CLUSTER`, as `aws eks get-token` and
//! aws-iam-authenticator make it. The API server's authenticator calls the
//! URL and maps the caller's IAM identity to a Kubernetes user. Valid 15
//! minutes; callers make a fresh one well before then.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::contract::ProviderError;

/// The prefix every EKS token starts with.
pub const PREFIX: &str = "k8s-aws-v1.";

/// The header that binds a token to one cluster.
pub const CLUSTER_HEADER: &str = "x-k8s-aws-id";

/// A token for `cluster` signed with the credentials and region of `config`.
pub async fn eks_token(config: &SdkConfig, cluster: &str) -> Result<String, ProviderError> {
    let provider = config.credentials_provider().ok_or_else(|| {
        ProviderError::auth("no AWS credentials to sign an EKS token with: configure the SDK's standard chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, …)")
            .with_help(crate::aws::error::AUTH_HELP)
    })?;
    let creds = provider.provide_credentials().await.map_err(|e| {
        ProviderError::retryable(format!(
            "could not load AWS credentials for the EKS token: {e}"
        ))
    })?;
    let region = config
        .region()
        .map(|r| r.as_ref().to_string())
        .unwrap_or_else(|| "us-east-1".into());
    presign(&creds, &region, cluster, SystemTime::now())
}

/// The token for `cluster` from `creds` in `region` at time `now`.
pub fn presign(
    creds: &Credentials,
    region: &str,
    cluster: &str,
    now: SystemTime,
) -> Result<String, ProviderError> {
    let url =
        format!("https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(60));
    let identity = creds.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| ProviderError::fatal(format!("could not sign an EKS token: {e}")))?
        .into();
    let headers = [(CLUSTER_HEADER, cluster)];
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        headers.iter().copied(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| ProviderError::fatal(format!("could not sign an EKS token: {e}")))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| ProviderError::fatal(format!("could not sign an EKS token: {e}")))?
        .into_parts();
    let mut request = http::Request::builder()
        .method("GET")
        .uri(&url)
        .header(CLUSTER_HEADER, cluster)
        .body(())
        .map_err(|e| ProviderError::fatal(format!("could not build the STS request: {e}")))?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(format!(
        "{PREFIX}{}",
        URL_SAFE_NO_PAD.encode(request.uri().to_string())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_a_presigned_sts_url_bound_to_the_cluster() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "secret",
            Some("session".into()),
            None,
            "test",
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let token = presign(&creds, "us-west-2", "dlc", at).unwrap();
        let body = token.strip_prefix(PREFIX).expect("prefix");
        assert!(!body.contains('='), "unpadded");
        let url = String::from_utf8(URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap();
        assert!(
            url.starts_with(
                "https://sts.us-west-2.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
            ),
            "{url}"
        );
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIDEXAMPLE%2F20231114%2Fus-west-2%2Fsts%2Faws4_request",
            "X-Amz-Date=20231114T221320Z",
            "X-Amz-Expires=60",
            "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id",
            "X-Amz-Signature=",
            "X-Amz-Security-Token=session",
        ] {
            assert!(url.contains(part), "{part} missing from {url}");
        }
        // Another cluster, another signature.
        let other = presign(&creds, "us-west-2", "other", at).unwrap();
        assert_ne!(token, other);
    }

    /// The token for `dlc` from the test cloud's credentials at a fixed
    /// time: the same text is what the test API server's webhook
    /// (tests/support/kube/eks_token/tests.rs) verifies, and refuses altered.
    const GOLDEN: &str = "k8s-aws-v1.aHR0cHM6Ly9zdHMudXMtZWFzdC0xLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZWZXJzaW9uPTIwMTEtMDYtMTUmWC1BbXotQWxnb3JpdGhtPUFXUzQtSE1BQy1TSEEyNTYmWC1BbXotQ3JlZGVudGlhbD10ZXN0aW5nJTJGMjAyMzExMTQlMkZ1cy1lYXN0LTElMkZzdHMlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDIzMTExNFQyMjEzMjBaJlgtQW16LUV4cGlyZXM9NjAmWC1BbXotU2lnbmVkSGVhZGVycz1ob3N0JTNCeC1rOHMtYXdzLWlkJlgtQW16LVNpZ25hdHVyZT0wMzk3NzViNWM5YTE0Yjc2NjkyYjdmZWRiOTI3ZGRjOTYxNDMzMzRkNWU5ZmM0MzFmNzdkM2I4MTE5MTVmNGYzJlgtQW16LVNlY3VyaXR5LVRva2VuPXRlc3Rpbmc";

    #[test]
    fn the_token_is_deterministic_and_what_the_webhook_verifies() {
        let creds = Credentials::new("testing", "testing", Some("testing".into()), None, "test");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(presign(&creds, "us-east-1", "dlc", at).unwrap(), GOLDEN);
    }
}
