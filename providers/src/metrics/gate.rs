//! Gates: what a step's `expect` asks of a captured value. A number is held
//! to `>= 300`, `> 0`, `<= 2.5`, `< 2.5`, `== 0`, `!= 0` or
//! `between 0.75 0.85` (both ends included); a table of numbers (losses by
//! step) to `decreasing` or `increasing`, which compare the mean of its
//! last third with the mean of its first third, so that one noisy step
//! does not decide. Text (the network NCCL used) is held to `== WORD` or
//! `!= WORD` (`transport = "== efa"`).

use serde_json::Value;

use super::Kind;

/// One gate, as written and as understood.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// As written (after the workflow's `${…}` were filled).
    pub text: String,
    test: Test,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Compare(Op, f64),
    Between(f64, f64),
    Trend { down: bool },
    Text { equal: bool, word: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
    Ne,
}

const OPS: [(&str, Op); 6] = [
    (">=", Op::Ge),
    ("<=", Op::Le),
    ("==", Op::Eq),
    ("!=", Op::Ne),
    (">", Op::Gt),
    ("<", Op::Lt),
];

/// What a gate takes, for errors.
pub const FORMS: &str = "`>= N`, `> N`, `<= N`, `< N`, `== N`, `!= N`, `between LOW HIGH`, `decreasing`, `increasing`, or for text `== WORD` and `!= WORD`";

/// A word a text gate compares with: letters, digits, `-`, `_` and `.`,
/// starting with a letter (so that `== 1e3` stays a number).
fn word(text: &str) -> Option<String> {
    let mut chars = text.chars();
    (chars.next()?.is_ascii_alphabetic()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    .then(|| text.to_string())
}

fn num(word: &str) -> Result<f64, String> {
    word.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| format!("`{word}` is not a number"))
}

impl Gate {
    /// Reads a gate; the error says what is wrong and what a gate looks like.
    pub fn parse(text: &str) -> Result<Gate, String> {
        let t = text.trim();
        let test = if let Some((sym, op)) = OPS.iter().find(|(s, _)| t.starts_with(s)) {
            let operand = t[sym.len()..].trim();
            match (op, word(operand)) {
                (Op::Eq | Op::Ne, Some(word)) => Test::Text {
                    equal: *op == Op::Eq,
                    word,
                },
                _ => Test::Compare(*op, num(operand)?),
            }
        } else {
            let words: Vec<&str> = t.split_whitespace().collect();
            match words.as_slice() {
                ["between", low, high] => {
                    let (low, high) = (num(low)?, num(high)?);
                    if low > high {
                        return Err(format!(
                            "`between {low} {high}`: the low end is above the high end"
                        ));
                    }
                    Test::Between(low, high)
                }
                ["between", ..] => {
                    return Err("`between` takes two numbers: `between LOW HIGH`".into());
                }
                ["decreasing"] => Test::Trend { down: true },
                ["increasing"] => Test::Trend { down: false },
                _ => return Err(format!("`{t}` is not a gate")),
            }
        };
        Ok(Gate {
            text: t.to_string(),
            test,
        })
    }

    /// The kind of value it judges.
    pub fn judges(&self) -> Kind {
        match self.test {
            Test::Trend { .. } => Kind::Table,
            Test::Text { .. } => Kind::Text,
            _ => Kind::Number,
        }
    }

    /// `Ok` when `value` passes; else why not, naming `name` and the value.
    pub fn judge(&self, name: &str, value: &Value) -> Result<(), String> {
        let found = Kind::of(value);
        if found != self.judges() {
            return Err(format!(
                "`{name} {}` judges {}, but {name} is {} ({})",
                self.text,
                self.judges().describe(),
                found.describe(),
                brief(value)
            ));
        }
        match &self.test {
            Test::Trend { down } => trend(name, value, *down),
            Test::Text { equal, word } => {
                let same = value.as_str() == Some(word.as_str());
                (same == *equal)
                    .then_some(())
                    .ok_or_else(|| format!("{name} = {} is not {}", brief(value), self.text))
            }
            Test::Compare(op, limit) => {
                let (op, limit) = (*op, *limit);
                let v = value.as_f64().unwrap_or(f64::NAN);
                let pass = match op {
                    Op::Ge => v >= limit,
                    Op::Gt => v > limit,
                    Op::Le => v <= limit,
                    Op::Lt => v < limit,
                    Op::Eq => v == limit,
                    Op::Ne => v != limit,
                };
                pass.then_some(())
                    .ok_or_else(|| format!("{name} = {} is not {}", brief(value), self.text))
            }
            Test::Between(low, high) => {
                let (low, high) = (*low, *high);
                let v = value.as_f64().unwrap_or(f64::NAN);
                (low <= v && v <= high)
                    .then_some(())
                    .ok_or_else(|| format!("{name} = {} is not {}", brief(value), self.text))
            }
        }
    }
}

/// A value as an error shows it: numbers as they are, tables by size.
fn brief(value: &Value) -> String {
    match value {
        Value::Array(a) => format!("{} entries", a.len()),
        Value::Object(o) => format!("{} entries", o.len()),
        Value::String(s) => format!("{s:?}"),
        v => v.to_string(),
    }
}

/// The numbers of a table: the second of `[step, value]` pairs, plain
/// numbers, or a table's number values.
fn series(value: &Value) -> Vec<f64> {
    let items: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o.values().collect(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .filter_map(|v| match v {
            Value::Array(pair) => pair.last().and_then(Value::as_f64),
            v => v.as_f64(),
        })
        .collect()
}

fn trend(name: &str, value: &Value, down: bool) -> Result<(), String> {
    let xs = series(value);
    let word = if down { "decreasing" } else { "increasing" };
    if xs.len() < 2 {
        return Err(format!(
            "{name} has {} number(s): `{word}` needs at least 2",
            xs.len()
        ));
    }
    let k = (xs.len() / 3).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&xs[..k]), mean(&xs[xs.len() - k..]));
    let pass = if down { last < first } else { last > first };
    pass.then_some(()).ok_or_else(|| {
        format!(
            "{name} is not {word}: the mean of its last {k} is {last:.4}, of its first {k} {first:.4}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_each_form_and_refuses_the_rest() {
        for ok in [
            ">= 300",
            ">=300",
            "> 0",
            "<= 2.5",
            "< 2.5",
            "== 0",
            "!= 1",
            "between 0.75 0.85",
            "decreasing",
            " increasing ",
            "== efa",
            "!= socket",
        ] {
            Gate::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, says) in [
            (">= lots", "`lots` is not a number"),
            ("=> 3", "is not a gate"),
            ("between 1", "takes two numbers"),
            ("between 2 1", "low end is above the high end"),
            ("300", "is not a gate"),
            (">= inf", "is not a number"),
            (">= efa", "`efa` is not a number"),
            ("== 'efa'", "is not a number"),
        ] {
            let e = Gate::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn numbers_pass_or_fail_with_their_value_and_threshold() {
        let g = Gate::parse(">= 300").unwrap();
        assert!(g.judge("busbw", &json!(483.05)).is_ok());
        assert!(g.judge("busbw", &json!(300)).is_ok());
        assert_eq!(
            g.judge("busbw", &json!(17.9053)).unwrap_err(),
            "busbw = 17.9053 is not >= 300"
        );
        let b = Gate::parse("between 0.75 0.85").unwrap();
        assert!(b.judge("auroc", &json!(0.80)).is_ok());
        assert!(b.judge("auroc", &json!(0.85)).is_ok());
        assert!(b.judge("auroc", &json!(0.9)).is_err());
        assert!(Gate::parse("== 0").unwrap().judge("oob", &json!(0)).is_ok());
        assert!(
            Gate::parse("< 2.5")
                .unwrap()
                .judge("loss", &json!(2.5))
                .is_err()
        );
    }

    #[test]
    fn a_gate_refuses_a_value_of_the_other_kind() {
        let e = Gate::parse(">= 3")
            .unwrap()
            .judge("sizes", &json!({"8": {}}))
            .unwrap_err();
        assert!(
            e.contains("judges a number, but sizes is a table of numbers"),
            "{e}"
        );
        let e = Gate::parse("decreasing")
            .unwrap()
            .judge("loss", &json!(1.2))
            .unwrap_err();
        assert!(
            e.contains("judges a table of numbers, but loss is a number"),
            "{e}"
        );
        let e = Gate::parse(">= 3")
            .unwrap()
            .judge("gpu", &json!("A100"))
            .unwrap_err();
        assert!(e.contains("gpu is text (\"A100\")"), "{e}");
    }

    #[test]
    fn text_is_held_to_a_word() {
        let efa = Gate::parse("== efa").unwrap();
        assert_eq!(efa.judges(), Kind::Text);
        assert!(efa.judge("transport", &json!("efa")).is_ok());
        assert_eq!(
            efa.judge("transport", &json!("socket")).unwrap_err(),
            "transport = \"socket\" is not == efa"
        );
        let not_socket = Gate::parse("!= socket").unwrap();
        assert!(not_socket.judge("transport", &json!("efa")).is_ok());
        assert!(not_socket.judge("transport", &json!("socket")).is_err());
        let e = efa.judge("busbw", &json!(3.5)).unwrap_err();
        assert!(e.contains("judges text, but busbw is a number"), "{e}");
        assert_eq!(Gate::parse("== 1e3").unwrap().judges(), Kind::Number);
    }

    #[test]
    fn trends_compare_the_last_third_with_the_first() {
        let down = Gate::parse("decreasing").unwrap();
        // Noisy but going down: one step up at the end does not decide.
        let losses = json!([[1, 2.0], [2, 1.9], [3, 1.7], [4, 1.5], [5, 1.2], [6, 1.3]]);
        assert!(down.judge("losses", &losses).is_ok());
        assert!(
            Gate::parse("increasing")
                .unwrap()
                .judge("losses", &losses)
                .is_err()
        );
        // The FSDP case's published excerpt: eight steps, not going down.
        let flat = json!([
            [90, 7.24291],
            [91, 7.2747],
            [92, 7.06632],
            [93, 7.17624],
            [94, 7.24291],
            [95, 7.13051],
            [96, 7.16901],
            [97, 7.50217]
        ]);
        let e = down.judge("losses", &flat).unwrap_err();
        assert!(
            e.contains("not decreasing: the mean of its last 2 is 7.3356, of its first 2 7.2588"),
            "{e}"
        );
        let e = down.judge("losses", &json!([[1, 2.0]])).unwrap_err();
        assert!(e.contains("needs at least 2"), "{e}");
    }
}
