//! Whether flow can reach AWS at all with a region and profile, asked once
//! before a command runs any step: the region is set somewhere, and the
//! SDK's credential chain yields credentials. Nothing is sent to AWS for
//! static or profile keys; a profile that assumes a role or uses SSO makes
//! its own calls, as the first real call would (the credentials are then
//! cached in the shared configuration, so that call is not repeated).

use aws_credential_types::provider::ProvideCredentials;

use super::config::sdk_config_for_access;
use super::error::AUTH_HELP;
use crate::contract::ProviderError;
use crate::error_chain::chain;

/// Where the SDK looks for credentials, in its order, for the error text.
pub const CREDENTIAL_CHAIN: &str = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
     the profile (AWS_PROFILE or `[workflow] profile`: keys, SSO, assume-role, credential_process), \
     web identity (AWS_WEB_IDENTITY_TOKEN_FILE), ECS container credentials, EC2 instance metadata";

/// Checks that `region` (else the SDK's default) is set and that the
/// credential chain for `profile` yields credentials: an
/// [`ErrorKind::Auth`](crate::contract::ErrorKind::Auth) error naming what is
/// missing otherwise, never a retryable one.
pub async fn check(region: Option<String>, profile: Option<String>) -> Result<(), ProviderError> {
    let config = sdk_config_for_access(region, profile).await?;
    let Some(provider) = config.credentials_provider() else {
        return Err(ProviderError::auth(format!(
            "no AWS credentials provider is configured (the chain: {CREDENTIAL_CHAIN})"
        ))
        .with_help(AUTH_HELP));
    };
    provider
        .provide_credentials()
        .await
        .map(|_| ())
        .map_err(|e| {
            ProviderError::auth(format!(
                "no usable AWS credentials: {} (the chain: {CREDENTIAL_CHAIN})",
                chain(&e)
            ))
            .with_help(AUTH_HELP)
        })
}
