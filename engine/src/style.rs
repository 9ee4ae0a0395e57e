//! Terminal styling: colour only when wanted (a terminal, no `NO_COLOR`).

/// Whether and how to colour output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Emit ANSI colours.
    pub color: bool,
}

impl Style {
    /// Colour when `forced`, or when stream is a terminal and `NO_COLOR` is unset.
    pub fn detect(choice: ColorChoice, is_terminal: bool) -> Self {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        };
        Style { color }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Dim text.
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Green (success).
    pub fn ok(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Red (failure).
    pub fn err(&self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Yellow (attention).
    pub fn warn(&self, text: &str) -> String {
        self.paint("33", text)
    }
}

/// `--color` choices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}
