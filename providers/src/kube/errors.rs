//! Kubernetes API errors as [`ProviderError`]s: the server's message with
//! what was being done, the client error kept as the source, and a kind:
//! throttling, server faults and broken connections retryable; 401 and 403
//! `auth`; 404 `not-found`; 409 `conflict`; 400 and 422 `invalid`.

use crate::contract::{ErrorKind, ProviderError};
use crate::error_chain::chain;

/// What to do when the API server refuses who flow is.
const AUTH_HELP: &str = "check the cluster credentials: the kubeconfig's current context \
     (`KUBECONFIG`, `kubectl auth can-i` with the same settings), or for EKS that the IAM \
     identity flow runs as has an access entry or `aws-auth` mapping on the cluster";

/// `err` from the call that tried `what` (`"apply Deployment default/web"`).
pub fn kube(what: &str, err: ::kube::Error) -> ProviderError {
    let error = match &err {
        ::kube::Error::Api(status) => {
            let text = if status.message.is_empty() {
                format!("{what}: HTTP {} {}", status.code, status.reason)
            } else {
                format!("{what}: {}", status.message)
            };
            let kind = match status.code {
                429 | 500 | 502 | 503 | 504 => ErrorKind::Retryable,
                _ if status.reason == "ServerTimeout" => ErrorKind::Retryable,
                401 | 403 => ErrorKind::Auth,
                404 => ErrorKind::NotFound,
                409 => ErrorKind::Conflict,
                400 | 422 => ErrorKind::Invalid,
                _ => ErrorKind::Failed,
            };
            let error = ProviderError::new(kind, text);
            match kind {
                ErrorKind::Auth => error.with_help(AUTH_HELP),
                ErrorKind::Invalid => error.with_help(
                    "the API server rejected the object as written: fix the field it names in the manifest",
                ),
                _ => error,
            }
        }
        ::kube::Error::HyperError(_) | ::kube::Error::Service(_) | ::kube::Error::ReadEvents(_) => {
            ProviderError::retryable(format!("{what}: {}", chain(&err))).with_help(
                "the API server could not be reached or broke the connection: check that the cluster \
                 endpoint is up and reachable from here, then run `flow apply` again",
            )
        }
        _ => ProviderError::fatal(format!("{what}: {}", chain(&err))),
    };
    error.with_source(err)
}

/// The HTTP status of an API error, if `err` is one.
pub fn status(err: &::kube::Error) -> Option<u16> {
    match err {
        ::kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> ::kube::Error {
        let mut s = ::kube::core::Status::failure(message, reason);
        s.code = code;
        ::kube::Error::Api(Box::new(s))
    }

    #[test]
    fn server_faults_retry_client_errors_do_not() {
        let e = kube(
            "apply Deployment default/web",
            api(422, "Invalid", "spec.replicas: Invalid value"),
        );
        assert!(!e.is_retryable());
        assert_eq!(
            e.message,
            "apply Deployment default/web: spec.replicas: Invalid value"
        );
        assert!(kube("x", api(503, "ServiceUnavailable", "")).is_retryable());
        assert!(kube("x", api(429, "TooManyRequests", "slow down")).is_retryable());
        assert_eq!(status(&api(404, "NotFound", "")), Some(404));
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.help.is_some());
        assert!(std::error::Error::source(&e).is_some());
        let denied = kube("x", api(403, "Forbidden", "pods is forbidden"));
        assert_eq!(denied.kind, ErrorKind::Auth);
        assert!(denied.help.as_deref().unwrap().contains("kubeconfig"));
        assert_eq!(
            kube("x", api(404, "NotFound", "")).kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            kube("x", api(409, "AlreadyExists", "")).kind,
            ErrorKind::Conflict
        );
    }
}
