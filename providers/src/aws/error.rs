//! AWS errors as [`ProviderError`]s: the service's own message and the
//! failing resource, never a debug dump, with the SDK error kept as the
//! source. Each is classified: throttling, 5xx answers, timeouts and broken
//! connections retryable; refused credentials `auth` (with what to set);
//! rejected parameters `invalid`; a missing object `not-found`; a name that
//! is taken `conflict`; anything else `failed`.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::contract::{ErrorKind, ProviderError};
use crate::error_chain::chain;

/// Error codes that mean "slow down", across the AWS protocols.
const THROTTLING: [&str; 8] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "SlowDown",
];

impl ProviderError {
    /// Whether AWS refused the call for its rate: the error is retryable
    /// and its message names a throttling code, as [`aws`] writes it
    /// ("…: Rate exceeded (ThrottlingException)"). A refresh tries such a
    /// read again for as long as its timeout allows.
    pub fn is_throttling(&self) -> bool {
        self.kind == ErrorKind::Retryable
            && THROTTLING
                .iter()
                .any(|c| self.message.contains(&format!("({c})")))
    }
}

/// HTTP statuses worth retrying.
const TRANSIENT_STATUS: [u16; 5] = [429, 500, 502, 503, 504];

/// Error codes of transient server faults.
const TRANSIENT_CODES: [&str; 4] = [
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "RequestTimeout",
];

/// Error codes that mean the credentials are missing, expired or not allowed.
const AUTH_CODES: [&str; 9] = [
    "ExpiredToken",
    "ExpiredTokenException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "AuthFailure",
];

/// What to do about refused credentials.
pub(crate) const AUTH_HELP: &str = "check the AWS credentials flow runs with: `AWS_PROFILE` (or \
     `[workflow] profile`), `aws sts get-caller-identity` with the same settings, and that the \
     role may make this call; for a local endpoint set `AWS_ENDPOINT_URL`";

/// The kind of a service error with this code (not a transient one).
pub(crate) fn kind_of_code(code: &str) -> ErrorKind {
    if AUTH_CODES.contains(&code) {
        ErrorKind::Auth
    } else if code.contains("NotFound") || code.starts_with("NoSuch") {
        ErrorKind::NotFound
    } else if code.contains("AlreadyExists")
        || code == "ResourceExistsException"
        || code == "BucketAlreadyExists"
        || code == "BucketAlreadyOwnedByYou"
    {
        ErrorKind::Conflict
    } else if code.starts_with("Validation")
        || code.ends_with("ValidationException")
        || code.starts_with("InvalidParameter")
        || code.starts_with("InvalidRequest")
        || code == "MalformedPolicyDocumentException"
    {
        ErrorKind::Invalid
    } else {
        ErrorKind::Failed
    }
}

/// The error code of a service error, if it is one.
pub(crate) fn code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(e) => e.err().code(),
        _ => None,
    }
}

/// Whether an error with this code and HTTP status is worth retrying.
pub(crate) fn transient(code: Option<&str>, status: Option<u16>) -> bool {
    code.is_some_and(|c| THROTTLING.contains(&c) || TRANSIENT_CODES.contains(&c))
        || status.is_some_and(|s| TRANSIENT_STATUS.contains(&s))
}

/// `err` from the call that tried `what` (`"create stack \`vpc\`"`), as a
/// provider error: `what: message (Code)`.
pub(crate) fn aws<E>(
    what: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code();
            let message = e
                .message()
                .map(str::to_string)
                .or_else(|| code.map(str::to_string))
                .unwrap_or_else(|| {
                    let mut m = match status {
                        Some(s) => format!("the service answered HTTP {s}"),
                        None => "the service answered with an error".into(),
                    };
                    // An answer the SDK could not read as an error of this
                    // API: its start is the only explanation there is.
                    if let Some(body) = service.raw().body().bytes().and_then(excerpt) {
                        m.push_str(": ");
                        m.push_str(&body);
                    }
                    m
                });
            let text = match code {
                Some(c) if !message.contains(c) => format!("{what}: {message} ({c})"),
                _ => format!("{what}: {message}"),
            };
            let kind = if transient(code, status) {
                ErrorKind::Retryable
            } else if status == Some(403) && code.is_none() {
                ErrorKind::Auth
            } else {
                code.map_or(ErrorKind::Failed, kind_of_code)
            };
            classified(ProviderError::new(kind, text), err)
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            let text = format!("{what}: {}", chain(&err));
            // No credentials at all fail before anything is sent.
            let kind = if no_credentials(&text) {
                ErrorKind::Auth
            } else {
                ErrorKind::Retryable
            };
            classified(ProviderError::new(kind, text), err)
        }
        _ => {
            let text = format!("{what}: {}", chain(&err));
            let kind = if status.is_some_and(|s| TRANSIENT_STATUS.contains(&s)) {
                ErrorKind::Retryable
            } else if no_credentials(&text) {
                ErrorKind::Auth
            } else {
                ErrorKind::Failed
            };
            classified(ProviderError::new(kind, text), err)
        }
    }
}

/// `err` from the one call that would create or start something (CreateStack,
/// SubmitJob, …). A refusal the service answered (an HTTP 4xx that is not
/// throttling), or a request never sent (no credentials), proves nothing was
/// created: it is marked [`ErrorKind::NotCreated`], and the engine drops the
/// intent. A name already taken stays a conflict. Anything else (a timeout,
/// a 5xx, an answer that could not be read) may have acted and keeps its
/// kind, so the intent is kept and the next apply reads what happened.
pub(crate) fn refused<E>(
    what: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let answered_4xx = matches!(err, SdkError::ServiceError(_))
        && err
            .raw_response()
            .is_some_and(|r| (400..500).contains(&r.status().as_u16()));
    let never_sent = !matches!(err, SdkError::ServiceError(_) | SdkError::ResponseError(_));
    let error = aws(what, err);
    let proves_nothing = match error.kind {
        ErrorKind::Retryable | ErrorKind::Conflict | ErrorKind::NotCreated => false,
        ErrorKind::Auth => answered_4xx || never_sent,
        _ => answered_4xx,
    };
    if proves_nothing {
        error.of_kind(ErrorKind::NotCreated)
    } else {
        error
    }
}

/// `error` with `source` kept, and the help its kind calls for.
fn classified<E>(
    error: ProviderError,
    source: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ProviderError
where
    E: std::error::Error + Send + Sync + 'static,
{
    let error = match error.kind {
        ErrorKind::Auth => error.with_help(AUTH_HELP),
        ErrorKind::Retryable => error.with_help(
            "a transient AWS answer (throttling, a server error or a broken connection): \
             flow retried it as the step's `retries` allow; run `flow apply` again, or raise `retries`",
        ),
        _ => error,
    };
    error.with_source(source)
}

/// Whether an SDK error text says that no credentials could be found.
fn no_credentials(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("no credentials")
        || t.contains("credentials provider")
        || t.contains("credential provider")
        || t.contains("provided credentials")
        || t.contains("failed to load credentials")
}

/// The start of a response body, if it is text.
fn excerpt(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty() {
        return None;
    }
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    Some(cut.replace(['\n', '\r'], " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(excerpt(b"  "), None);
        assert_eq!(
            excerpt(b"{\"message\": \"x\"}\n").unwrap(),
            "{\"message\": \"x\"}"
        );
        assert!(excerpt(&[b'a'; 400]).unwrap().ends_with('…'));
        assert_eq!(excerpt(&[0xff, 0xfe]), None);
    }

    /// The texts the SDK gives when its chain found no credentials, as
    /// aws-config 1.x words them (seen with the environment's keys unset
    /// and instance metadata disabled): never taken for a transient fault.
    #[test]
    fn the_sdks_words_for_no_credentials_are_auth() {
        for text in [
            "describe stack `a`: dispatch failure: other: the credential provider was not enabled: no providers in chain provided credentials",
            "delete secret `k`: failed to load credentials from the environment",
            "x: no credentials in the property bag",
        ] {
            assert!(no_credentials(text), "{text}");
        }
        assert!(!no_credentials(
            "describe stack `a`: dispatch failure: io error: connection refused"
        ));
    }

    #[test]
    fn codes_are_classified_by_kind() {
        assert_eq!(kind_of_code("ExpiredTokenException"), ErrorKind::Auth);
        assert_eq!(kind_of_code("AccessDenied"), ErrorKind::Auth);
        assert_eq!(kind_of_code("ValidationError"), ErrorKind::Invalid);
        assert_eq!(
            kind_of_code("InvalidParameterException"),
            ErrorKind::Invalid
        );
        assert_eq!(
            kind_of_code("ResourceNotFoundException"),
            ErrorKind::NotFound
        );
        assert_eq!(kind_of_code("NoSuchBucket"), ErrorKind::NotFound);
        assert_eq!(kind_of_code("AlreadyExistsException"), ErrorKind::Conflict);
        assert_eq!(kind_of_code("ResourceExistsException"), ErrorKind::Conflict);
        assert_eq!(kind_of_code("LimitExceededException"), ErrorKind::Failed);
    }

    #[test]
    fn service_errors_keep_their_source_and_get_help_by_kind() {
        use aws_sdk_s3::config::http::HttpResponse;
        use aws_sdk_s3::error::ErrorMetadata;
        use aws_sdk_s3::operation::head_bucket::HeadBucketError;
        use aws_sdk_s3::primitives::SdkBody;
        let meta = ErrorMetadata::builder()
            .code("ExpiredToken")
            .message("The security token included in the request is expired")
            .build();
        let raw = HttpResponse::new(400.try_into().unwrap(), SdkBody::from(""));
        let err = SdkError::service_error(HeadBucketError::generic(meta), raw);
        let e = aws("look at bucket `b`", err);
        assert_eq!(e.kind, ErrorKind::Auth);
        assert_eq!(
            e.message,
            "look at bucket `b`: The security token included in the request is expired (ExpiredToken)"
        );
        assert!(e.help.as_deref().unwrap().contains("AWS_PROFILE"));
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn a_throttled_answer_is_told_from_other_retryable_ones() {
        use aws_sdk_s3::config::http::HttpResponse;
        use aws_sdk_s3::error::ErrorMetadata;
        use aws_sdk_s3::operation::head_bucket::HeadBucketError;
        use aws_sdk_s3::primitives::SdkBody;
        let answered = |status: u16, code: &str| {
            let meta = ErrorMetadata::builder()
                .code(code)
                .message("Rate exceeded")
                .build();
            let raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(""));
            aws(
                "look at bucket `b`",
                SdkError::service_error(HeadBucketError::generic(meta), raw),
            )
        };
        for code in [
            "Throttling",
            "ThrottlingException",
            "RequestLimitExceeded",
            "SlowDown",
        ] {
            assert!(answered(400, code).is_throttling(), "{code}");
        }
        assert!(!answered(500, "InternalError").is_throttling());
        assert!(!answered(400, "ValidationError").is_throttling());
    }

    #[test]
    fn only_a_refusal_of_a_create_proves_nothing_was_created() {
        use aws_sdk_s3::config::http::HttpResponse;
        use aws_sdk_s3::error::ErrorMetadata;
        use aws_sdk_s3::operation::create_bucket::CreateBucketError;
        use aws_sdk_s3::primitives::SdkBody;
        let answered = |status: u16, code: &str| {
            let meta = ErrorMetadata::builder().code(code).message("m").build();
            let raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(""));
            SdkError::service_error(CreateBucketError::generic(meta), raw)
        };
        let kind = |e| refused("create bucket `b`", e).kind;
        assert_eq!(
            kind(answered(400, "InvalidBucketName")),
            ErrorKind::NotCreated
        );
        assert_eq!(kind(answered(403, "AccessDenied")), ErrorKind::NotCreated);
        // Retries may follow; a 5xx may have acted; a taken name is a conflict.
        assert_eq!(kind(answered(400, "SlowDown")), ErrorKind::Retryable);
        assert_eq!(kind(answered(500, "InternalError")), ErrorKind::Retryable);
        assert_eq!(
            kind(answered(409, "BucketAlreadyExists")),
            ErrorKind::Conflict
        );
        // An answer that could not be read may follow a create that happened.
        let unreadable: SdkError<CreateBucketError, HttpResponse> = SdkError::response_error(
            std::io::Error::other("truncated body"),
            HttpResponse::new(200.try_into().unwrap(), SdkBody::from("<Create")),
        );
        assert_eq!(kind(unreadable), ErrorKind::Retryable);
    }

    #[test]
    fn throttling_and_server_faults_are_transient() {
        for c in [
            "Throttling",
            "ThrottlingException",
            "TooManyRequestsException",
            "RequestLimitExceeded",
            "SlowDown",
        ] {
            assert!(transient(Some(c), Some(400)), "{c}");
        }
        for s in [429, 500, 502, 503, 504] {
            assert!(transient(None, Some(s)), "{s}");
        }
        assert!(!transient(Some("ValidationError"), Some(400)));
        assert!(!transient(Some("AccessDenied"), Some(403)));
        assert!(!transient(None, None));
    }
}
