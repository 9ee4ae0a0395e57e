//! The answers the fault proxy gives instead of forwarding: an injected
//! error shaped as its service's protocol shapes errors (status, error code,
//! headers and body), so the SDK reads it as the real service's.

/// A fault the proxy can inject instead of forwarding a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The service's throttling error in its protocol's shape (400
    /// `ThrottlingException` / `Throttling`, 429 for Batch, 503 `SlowDown` for S3).
    Throttle,
    /// A bare 429 Too Many Requests.
    TooMany,
    /// 500 Internal Server Error, in the protocol's shape.
    Internal,
    /// 503 Service Unavailable, in the protocol's shape.
    Unavailable,
    /// The connection reset before any answer (the request never reaches moto).
    Reset,
    /// The request forwarded after a delay.
    Slow,
    /// A 400 `ValidationException` in the protocol's shape, never forwarded:
    /// a refusal that proves nothing was done.
    Refused,
    /// The request forwarded to moto (it acts on it), then the connection
    /// reset before any answer: the answer is lost.
    Lost,
    /// The request forwarded, and the answer cut off halfway through its
    /// body (halfway through its head when it has no body).
    Truncated,
    /// The request forwarded, and the answer held back for longer than the
    /// SDK waits (`FLOW_AWS_ATTEMPT_TIMEOUT` in the tests), then dropped.
    Stalled,
}

/// The wire protocol of a request, which decides the shape of its error
/// answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// JSON named by `X-Amz-Target` (Secrets Manager, ECR, …).
    Json,
    /// A form-encoded query (CloudFormation, IAM, …).
    Query,
    /// EC2's form-encoded query, whose errors have a shape of their own.
    Ec2,
    /// REST with JSON under `/v1/` (Batch).
    RestJson,
    /// Any other REST request (S3).
    RestXml,
}

/// The answer for an injected error, shaped as the protocol's errors are.
pub fn error_response(fault: Fault, protocol: Protocol) -> Vec<u8> {
    let (status, reason) = match fault {
        Fault::Throttle => match protocol {
            Protocol::RestJson => (429, "Too Many Requests"),
            Protocol::RestXml | Protocol::Ec2 => (503, "Slow Down"),
            _ => (400, "Bad Request"),
        },
        Fault::TooMany => (429, "Too Many Requests"),
        Fault::Refused => (400, "Bad Request"),
        Fault::Internal => (500, "Internal Server Error"),
        _ => (503, "Service Unavailable"),
    };
    let code = match (fault, protocol) {
        (Fault::Throttle, Protocol::Json) => "ThrottlingException",
        (Fault::Throttle, Protocol::Query) => "Throttling",
        (Fault::Throttle, Protocol::Ec2) => "RequestLimitExceeded",
        (Fault::Throttle, Protocol::RestJson) => "TooManyRequestsException",
        (Fault::Throttle, Protocol::RestXml) => "SlowDown",
        (Fault::TooMany, _) => "",
        (Fault::Refused, _) => "ValidationException",
        (Fault::Internal, Protocol::RestXml | Protocol::Ec2) => "InternalError",
        (Fault::Internal, _) => "InternalFailure",
        _ => "ServiceUnavailable",
    };
    let message = match fault {
        Fault::Throttle | Fault::TooMany => "Rate exceeded",
        Fault::Internal => "We encountered an internal error. Please try again.",
        Fault::Refused => "The request was refused by the fault proxy.",
        _ => "Service is unavailable. Please try again.",
    };
    let (content_type, extra, body) = match (protocol, code.is_empty()) {
        (_, true) => ("text/plain", String::new(), "Too Many Requests".to_string()),
        (Protocol::Json, _) => (
            "application/x-amz-json-1.1",
            format!("x-amzn-ErrorType: {code}\r\n"),
            format!(r#"{{"__type":"{code}","message":"{message}"}}"#),
        ),
        (Protocol::RestJson, _) => (
            "application/json",
            format!("x-amzn-ErrorType: {code}\r\n"),
            format!(r#"{{"message":"{message}"}}"#),
        ),
        (Protocol::Query, _) => (
            "text/xml",
            String::new(),
            format!(
                r#"<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>{}</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"#,
                if status >= 500 { "Receiver" } else { "Sender" }
            ),
        ),
        (Protocol::Ec2, _) => (
            "text/xml",
            String::new(),
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>"#
            ),
        ),
        (Protocol::RestXml, _) => (
            "application/xml",
            String::new(),
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"#
            ),
        ),
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n{extra}x-amzn-RequestId: fault-proxy\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
