//! The types an expression's values can have, as far as they are known
//! before anything runs.

/// What a value is known to be before it is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// Text.
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// A list.
    List,
    /// A table.
    Table,
    /// `null`.
    Null,
    /// Not known until the value is computed (a step output, an element).
    Any,
}

impl Ty {
    /// The type of a value.
    pub fn of(v: &serde_json::Value) -> Ty {
        use serde_json::Value as V;
        match v {
            V::String(_) => Ty::String,
            V::Number(_) => Ty::Number,
            V::Bool(_) => Ty::Bool,
            V::Array(_) => Ty::List,
            V::Object(_) => Ty::Table,
            V::Null => Ty::Null,
        }
    }

    /// How it reads in a message: "a string".
    pub fn phrase(self) -> &'static str {
        match self {
            Ty::String => "a string",
            Ty::Number => "a number",
            Ty::Bool => "a boolean",
            Ty::List => "a list",
            Ty::Table => "a table",
            Ty::Null => "null",
            Ty::Any => "any value",
        }
    }

    /// Whether a value of this type can be used where one of `accepted` is
    /// wanted: numbers and booleans are read as text where text is wanted.
    pub fn fits(self, accepted: &[Ty]) -> bool {
        self == Ty::Any
            || accepted.iter().any(|a| {
                *a == Ty::Any
                    || *a == self
                    || (*a == Ty::String && matches!(self, Ty::Number | Ty::Bool))
            })
    }
}
