//! What goes wrong while an expression is computed.

use crate::diag::Span;

/// A problem found while computing a value.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalError {
    /// The diagnostic code: `flow::bad-reference` for a reference that has
    /// no value, `flow::bad-expression` for anything else.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Span,
    /// How to fix it, when there is more to say.
    pub help: Option<String>,
    /// The file the span is in, when not the one being evaluated (a
    /// module's input is written at its call, a module's output in the
    /// module).
    pub source: Option<crate::diag::Source>,
}

/// A reference that has no value (`flow::bad-reference`).
pub(super) fn bad_reference(message: String, span: &Span) -> EvalError {
    EvalError {
        code: "flow::bad-reference",
        message,
        span: span.clone(),
        help: None,
        source: None,
    }
}

/// Anything else wrong with an expression (`flow::bad-expression`).
pub(super) fn bad(message: String, span: &Span, help: &str) -> EvalError {
    EvalError {
        code: "flow::bad-expression",
        message,
        span: span.clone(),
        help: Some(help.to_string()),
        source: None,
    }
}
