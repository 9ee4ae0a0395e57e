//! The errors of provider operations: what kind of failure each is (which
//! decides retries and whether an intent may be dropped), with a next step.

use std::sync::Arc;

/// What kind of failure a [`ProviderError`] is. The engine decides by it
/// whether to retry, and whether the operation may have acted (its intent is
/// kept and reconciled) or provably did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: throttling, a 5xx answer, a timeout or a broken connection.
    /// The engine retries with backoff.
    Retryable,
    /// The answer proves that nothing was created or changed: the request was
    /// refused before the far side acted on it.
    NotCreated,
    /// An object of that name exists and is not the step's own.
    Conflict,
    /// The object the step recorded, or names, does not exist.
    NotFound,
    /// Credentials are missing, expired or not allowed to do this.
    Auth,
    /// The inputs were rejected, by the provider or by the service.
    Invalid,
    /// Anything else: the operation failed and may have acted.
    Failed,
}

impl ErrorKind {
    /// A short name for logs and JSON (`not-created`, `conflict`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::NotCreated => "not-created",
            ErrorKind::Conflict => "conflict",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Auth => "auth",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Failed => "failed",
        }
    }
}

/// An error from a provider operation: what failed, what kind of failure it
/// is, what the user can do next, and the underlying error if there is one.
#[derive(Debug, Clone)]
pub struct ProviderError {
    /// What kind of failure it is.
    pub kind: ErrorKind,
    /// The service's own message, with the failing resource named.
    pub message: String,
    /// The next step for the user, when there is one.
    pub help: Option<String>,
    /// The underlying error (an SDK or I/O error), kept for its chain.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    /// The step input the service refused, as a path (`["instance_groups",
    /// "1", "instance_type"]`), when the provider can tell: the engine
    /// shows the workflow file's line and column of it. Empty: none.
    pub input: Vec<String>,
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProviderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl ProviderError {
    /// An error of `kind` with `message`, no help and no source.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ProviderError {
            kind,
            message: message.into(),
            help: None,
            source: None,
            input: Vec::new(),
        }
    }

    /// A permanent failure after which the operation may have acted.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// A transient failure the engine may retry with backoff.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Retryable, message)
    }

    /// A refusal that proves nothing was created or changed.
    pub fn not_created(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotCreated, message)
    }

    /// An object of that name exists and is not the step's.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// The object does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Credentials missing, expired or denied.
    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Auth, message)
    }

    /// The inputs were rejected.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    /// A step input the provider cannot use, found before it called anything
    /// (the engine's schema check normally catches these first).
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::invalid(message).with_help(
            "fix the step's input in the workflow; `flow validate FILE` checks inputs before anything runs",
        )
    }

    /// The object flow was creating or waiting for was deleted by something
    /// else meanwhile; `message` says which (`` cluster `x` disappeared ``).
    pub fn vanished(message: impl Into<String>) -> Self {
        Self::not_found(message).with_help(
            "something outside flow deleted it (a person, a cleanup script, another tool); \
             `flow plan` shows what flow will do next, and `flow apply --replace STEP` creates it again",
        )
    }

    /// The same error, pointing at the step input `path` it concerns.
    pub fn at_input<S: Into<String>>(mut self, path: impl IntoIterator<Item = S>) -> Self {
        self.input = path.into_iter().map(Into::into).collect();
        self
    }

    /// The same error with a next step for the user.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The same error with the underlying error kept as its source.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// The same error, met before the operation acted on anything (a local
    /// file refused, a fetched manifest that fails its pin): it proves
    /// nothing was made or changed, so the engine forgets the operation
    /// instead of checking it again with the same inputs. A transient
    /// failure stays retryable.
    pub fn before_acting(mut self) -> Self {
        if self.kind != ErrorKind::Retryable {
            self.kind = ErrorKind::NotCreated;
        }
        self
    }

    /// The same error, of another kind.
    pub fn of_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Whether the engine may retry it.
    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}
