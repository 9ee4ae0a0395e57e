//! The three EC2 calls the EFA rules need at plan and apply, over EC2's
//! Query API (a form POST signed with SigV4, an XML answer): flow builds no
//! EC2 SDK crate for them. `DescribeInstanceTypes` (EFA support and
//! `EfaInfo.MaximumEfaInterfaces`), `DescribeSubnets` (each subnet's zone)
//! and `DescribeSecurityGroups` (the all-traffic rules that name the group
//! itself). The answers are read in [`answers`].

pub(crate) mod answers;

use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub(crate) use answers::{InstanceTypeEfa, SelfRules};

use crate::contract::ProviderError;

/// The Query API version of EC2.
const VERSION: &str = "2016-11-15";

/// An EC2 endpoint with the credentials to sign for it.
pub(crate) struct Ec2 {
    config: SdkConfig,
}

impl Ec2 {
    /// EC2 in the region (and at the endpoint, if one is set) of `config`.
    pub(crate) fn new(config: &SdkConfig) -> Self {
        Ec2 {
            config: config.clone(),
        }
    }

    /// What each of `types` has of EFA.
    pub(crate) async fn instance_types(
        &self,
        types: &[String],
    ) -> Result<Vec<InstanceTypeEfa>, ProviderError> {
        let params = numbered("InstanceType", types);
        let xml = self.call("DescribeInstanceTypes", &params).await?;
        answers::instance_types(&xml)
    }

    /// Each of `subnets` with its Availability Zone.
    pub(crate) async fn subnet_zones(
        &self,
        subnets: &[String],
    ) -> Result<Vec<(String, String)>, ProviderError> {
        let params = numbered("SubnetId", subnets);
        let xml = self.call("DescribeSubnets", &params).await?;
        answers::subnet_zones(&xml)
    }

    /// Each of `groups` with its self-referencing all-traffic rules.
    pub(crate) async fn security_groups(
        &self,
        groups: &[String],
    ) -> Result<Vec<SelfRules>, ProviderError> {
        let params = numbered("GroupId", groups);
        let xml = self.call("DescribeSecurityGroups", &params).await?;
        answers::security_groups(&xml)
    }

    /// The answer to `action` with `params`, as XML text.
    async fn call(
        &self,
        action: &str,
        params: &[(String, String)],
    ) -> Result<String, ProviderError> {
        let region = self
            .config
            .region()
            .map(|r| r.as_ref().to_string())
            .unwrap_or_else(|| "us-east-1".into());
        let url = match self.config.endpoint_url() {
            Some(e) => format!("{}/", e.trim_end_matches('/')),
            None => format!("https://ec2.{region}.amazonaws.com/"),
        };
        let mut pairs = vec![
            ("Action".to_string(), action.to_string()),
            ("Version".to_string(), VERSION.to_string()),
        ];
        pairs.extend(params.iter().cloned());
        let body = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let request = self.signed(&url, &region, body).await?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .map_err(|e| ProviderError::fatal(format!("no TLS roots to reach EC2: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client: Client<_, Full<bytes::Bytes>> =
            Client::builder(TokioExecutor::new()).build(https);
        let resp = client
            .request(request)
            .await
            .map_err(|e| ProviderError::retryable(format!("EC2 {action}: {e}")))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ProviderError::retryable(format!("EC2 {action}: {e}")))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            let (code, message) = answers::error(&text);
            let err = format!("EC2 {action}: {code}: {message}");
            return Err(match (status.as_u16(), code.as_str()) {
                (401 | 403, _) | (_, "AuthFailure" | "UnauthorizedOperation") => {
                    ProviderError::auth(err)
                }
                (s, _) if s >= 500 => ProviderError::retryable(err),
                (_, "RequestLimitExceeded" | "Throttling") => ProviderError::retryable(err),
                _ => ProviderError::fatal(err),
            });
        }
        Ok(text)
    }

    /// The POST of `body` to `url`, signed for EC2 in `region`.
    async fn signed(
        &self,
        url: &str,
        region: &str,
        body: String,
    ) -> Result<http::Request<Full<bytes::Bytes>>, ProviderError> {
        let provider = self.config.credentials_provider().ok_or_else(|| {
            ProviderError::auth("no AWS credentials to call EC2 with")
                .with_help(crate::aws::error::AUTH_HELP)
        })?;
        let creds = provider.provide_credentials().await.map_err(|e| {
            ProviderError::retryable(format!("could not load AWS credentials: {e}"))
        })?;
        let identity = creds.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name("ec2")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| ProviderError::fatal(format!("could not sign an EC2 call: {e}")))?
            .into();
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let headers = [("content-type", content_type)];
        let signable = SignableRequest::new(
            "POST",
            url,
            headers.iter().copied(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| ProviderError::fatal(format!("could not sign an EC2 call: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| ProviderError::fatal(format!("could not sign an EC2 call: {e}")))?
            .into_parts();
        let mut request = http::Request::builder()
            .method("POST")
            .uri(url)
            .header("content-type", content_type)
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| ProviderError::fatal(format!("could not build an EC2 call: {e}")))?;
        instructions.apply_to_request_http1x(&mut request);
        Ok(request)
    }
}

/// `text` percent-encoded for a form (all but letters, digits, `-_.~`).
fn encode(text: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const FORM: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(text, FORM).to_string()
}

/// `NAME.1=a&NAME.2=b`: the Query API's list parameters.
fn numbered(name: &str, values: &[String]) -> Vec<(String, String)> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("{name}.{}", i + 1), v.clone()))
        .collect()
}
