//! Diagnostics: one problem with a source span, a label and a help line,
//! rendered by miette; and the collection a command reports in one run.

use std::fmt;
use std::sync::Arc;

use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan,
};

/// A source file a diagnostic can point into.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The name shown to users (the path as given on the command line).
    pub name: String,
    /// The file's text.
    pub text: Arc<String>,
}

impl Source {
    /// A source with the given display name and text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Source {
            name: name.into(),
            text: Arc::new(text.into()),
        }
    }

    fn named(&self) -> NamedSource<Arc<String>> {
        NamedSource::new(&self.name, self.text.clone()).with_language("toml")
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let upto = &self.text[..offset.min(self.text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }
}

/// Byte range in a source.
pub type Span = std::ops::Range<usize>;

/// One problem, pointing at the exact place that causes it.
#[derive(Debug)]
pub struct Diag {
    /// A stable code, e.g. `flow::unknown-step`.
    pub code: &'static str,
    /// What is wrong, in one sentence.
    pub message: String,
    /// The file the labels point into.
    pub source: Option<Source>,
    named: Option<NamedSource<Arc<String>>>,
    /// Labelled spans; the first is the primary one.
    pub labels: Vec<(Span, String)>,
    /// How to fix it.
    pub help: Option<String>,
    /// Other places that explain it, in other files: the call of the
    /// module a problem is in.
    pub related: Vec<Diag>,
}

impl Diag {
    /// A problem with no location yet.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Diag {
            code,
            message: message.into(),
            source: None,
            named: None,
            labels: Vec::new(),
            help: None,
            related: Vec::new(),
        }
    }

    /// Point into `source`.
    pub fn in_source(mut self, source: &Source) -> Self {
        self.source = Some(source.clone());
        self.named = Some(source.named());
        self
    }

    /// Add a labelled span.
    pub fn label(mut self, span: Span, text: impl Into<String>) -> Self {
        self.labels.push((span, text.into()));
        self
    }

    /// Add a help line.
    pub fn help(mut self, text: impl Into<String>) -> Self {
        self.help = Some(text.into());
        self
    }

    /// Also show where a module was called, `span` of `source` with `text`
    /// (rendered after the problem).
    pub fn also_at(self, source: &Source, span: Span, text: impl Into<String>) -> Self {
        self.related_at("flow::called-here", source, span, text.into())
    }

    /// Also show another part of the problem that is in another file.
    pub fn see_also(self, source: &Source, span: Span, text: impl Into<String>) -> Self {
        self.related_at("flow::see-also", source, span, text.into())
    }

    fn related_at(mut self, code: &'static str, source: &Source, span: Span, text: String) -> Self {
        self.related.push(
            Diag::new(code, text.clone())
                .in_source(source)
                .label(span, text),
        );
        self
    }

    /// `file:line:col` of the primary label, if any.
    pub fn location(&self) -> Option<String> {
        let src = self.source.as_ref()?;
        let (span, _) = self.labels.first()?;
        let (line, col) = src.line_col(span.start);
        Some(format!("{}:{}:{}", src.name, line, col))
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diag {}

impl Diagnostic for Diag {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h.clone()) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.named.as_ref().map(|n| n as &dyn miette::SourceCode)
    }

    fn severity(&self) -> Option<miette::Severity> {
        // A place that explains another problem is not a problem itself.
        matches!(self.code, "flow::called-here" | "flow::see-also")
            .then_some(miette::Severity::Advice)
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(self.related.iter().map(|d| d as &dyn Diagnostic)))
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() || self.source.is_none() {
            return None;
        }
        Some(Box::new(self.labels.iter().enumerate().map(
            |(i, (span, text))| {
                let len = span.end.saturating_sub(span.start);
                let s = SourceSpan::new(span.start.into(), len);
                if i == 0 {
                    LabeledSpan::new_primary_with_span(Some(text.clone()), s)
                } else {
                    LabeledSpan::new_with_span(Some(text.clone()), s)
                }
            },
        )))
    }
}

/// Every problem found in one run, reported together.
#[derive(Debug, Default)]
pub struct Diagnostics {
    /// The problems, in the order found.
    pub items: Vec<Diag>,
}

impl Diagnostics {
    /// Add a problem.
    pub fn push(&mut self, diag: Diag) {
        // The same problem found twice (one module input read by two steps,
        // one expression in every instance of a for_each) is reported once.
        let same = |d: &Diag| {
            d.code == diag.code
                && d.message == diag.message
                && d.labels == diag.labels
                && d.source.as_ref().map(|s| &s.name) == diag.source.as_ref().map(|s| &s.name)
        };
        if !self.items.iter().any(same) {
            self.items.push(diag);
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Add all problems from `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        other.items.into_iter().for_each(|d| self.push(d));
    }

    /// Render every problem plus a summary line, for a terminal (`color`) or a
    /// file. `width` wraps long lines.
    pub fn render(&self, color: bool, width: usize) -> String {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        let handler = GraphicalReportHandler::new_themed(theme)
            .with_width(width)
            .with_links(false)
            .with_context_lines(1);
        let mut out = String::new();
        // In file order: problems without a place first, then by file and offset.
        let mut ordered: Vec<&Diag> = self.items.iter().collect();
        ordered.sort_by_key(|d| {
            (
                d.source.as_ref().map(|s| s.name.clone()),
                d.labels.first().map_or(0, |(span, _)| span.start),
            )
        });
        for diag in ordered {
            if handler.render_report(&mut out, diag).is_err() {
                out.push_str(&format!("error: {}\n", diag.message));
            }
            out.push('\n');
        }
        let n = self.items.len();
        out.push_str(&format!(
            "error: {} problem{} found; nothing was changed\n",
            n,
            if n == 1 { "" } else { "s" }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_problem_is_reported_once() {
        let src = Source::new("w.toml", "a = 1\n");
        let mut d = Diagnostics::default();
        let one = || {
            Diag::new("flow::x", "bad")
                .in_source(&src)
                .label(0..1, "here")
        };
        d.push(one());
        d.push(one());
        d.push(
            Diag::new("flow::x", "bad")
                .in_source(&src)
                .label(2..3, "here"),
        );
        assert_eq!(d.items.len(), 2);
    }

    #[test]
    fn line_col_counts_from_one() {
        let src = Source::new("w.toml", "a = 1\nbb = 2\n");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(6), (2, 1));
        assert_eq!(src.line_col(9), (2, 4));
    }

    #[test]
    fn renders_label_help_and_summary() {
        let src = Source::new("w.toml", "[steps.a]\nprovider = \"nul\"\n");
        let mut all = Diagnostics::default();
        all.push(
            Diag::new("flow::unknown-provider", "unknown provider `nul`")
                .in_source(&src)
                .label(21..26, "not a provider")
                .help("did you mean `null`?"),
        );
        let text = all.render(false, 80);
        assert!(text.contains("w.toml:2:12"), "{text}");
        assert!(text.contains("not a provider"));
        assert!(text.contains("did you mean `null`?"));
        assert!(text.contains("1 problem found"));
        assert_eq!(all.items[0].location().unwrap(), "w.toml:2:12");
    }
}
