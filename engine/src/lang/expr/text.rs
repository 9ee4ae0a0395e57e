//! The text functions: split, join, format, replace, trim (lower and
//! upper are one-liners in the table).

use serde_json::Value;

use super::call::{CallContext, text, whole};

pub(super) fn split(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let (sep, s) = (text(&a[0]), text(&a[1]));
    if s.is_empty() {
        return Ok(Value::Array(vec![]));
    }
    if sep.is_empty() {
        return Ok(s.chars().map(|c| Value::from(c.to_string())).collect());
    }
    Ok(s.split(sep.as_str()).map(Value::from).collect())
}

pub(super) fn join(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let items = a[1]
        .as_array()
        .ok_or("the second argument must be a list")?;
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if item.is_array() || item.is_object() {
            return Err(format!("item {i} of the list is not text: {item}"));
        }
        parts.push(text(item));
    }
    Ok(parts.join(&text(&a[0])).into())
}

pub(super) fn replace(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let search = text(&a[1]);
    if search.is_empty() {
        return Err("the text to search for is empty".into());
    }
    Ok(text(&a[0]).replace(&search, &text(&a[2])).into())
}

pub(super) fn trim(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let s = text(&a[0]);
    Ok(match a.get(1) {
        None => s.trim().to_string(),
        Some(chars) => {
            let chars = text(chars);
            s.trim_matches(|c| chars.contains(c)).to_string()
        }
    }
    .into())
}

/// The widest `format` pads a value to.
const MAX_WIDTH: usize = 1000;

/// `format`: `%s` text, `%d` a whole number, `%f` a number (`%.2f`), `%v`
/// any value, `%q` quoted text, `%%` a percent sign; a width pads on the
/// left (`%5d`), or on the right with `-` (`%-5s`).
pub(super) fn format(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let spec = text(&a[0]);
    let mut args = a[1..].iter();
    let mut out = String::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            out.push('%');
            continue;
        }
        let left = chars.next_if_eq(&'-').is_some();
        let mut width = String::new();
        while let Some(d) = chars.next_if(|c| c.is_ascii_digit()) {
            width.push(d);
        }
        let mut precision = None;
        if chars.next_if_eq(&'.').is_some() {
            let mut p = String::new();
            while let Some(d) = chars.next_if(|c| c.is_ascii_digit()) {
                p.push(d);
            }
            match p.parse::<usize>() {
                Ok(n) if n <= MAX_WIDTH => precision = Some(n),
                Ok(_) | Err(_) if !p.is_empty() => {
                    return Err(format!("a precision above {MAX_WIDTH} is not supported"));
                }
                _ => precision = Some(0),
            }
        }
        let verb = chars
            .next()
            .ok_or("the spec ends with `%`; write `%%` for a percent sign")?;
        let arg = args.next().ok_or_else(|| {
            format!("`%{verb}` has no value: the spec asks for more values than given")
        })?;
        let piece = match verb {
            's' => text(arg),
            'v' => text(arg),
            'q' => Value::from(text(arg)).to_string(),
            'd' => whole(arg, "`%d`'s value")?.to_string(),
            'f' => {
                let f = arg
                    .as_f64()
                    .ok_or_else(|| format!("`%f` needs a number, not {arg}"))?;
                format!("{f:.*}", precision.unwrap_or(6))
            }
            other => {
                return Err(format!(
                    "`%{other}` is not a verb format knows (%s %d %f %v %q %%)"
                ));
            }
        };
        let width: usize = match width.as_str() {
            "" => 0,
            w => w.parse().unwrap_or(usize::MAX),
        };
        if width > MAX_WIDTH {
            return Err(format!("a width above {MAX_WIDTH} is not supported"));
        }
        let pad = width.saturating_sub(piece.chars().count());
        if left {
            out.push_str(&piece);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&piece);
        }
    }
    if args.next().is_some() {
        return Err("more values were given than the spec has verbs for".into());
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Function = fn(&[Value], &CallContext) -> Result<Value, String>;

    /// Call `f` with the arguments in the JSON array `args`.
    fn run(f: Function, args: Value) -> Result<Value, String> {
        let dir = flow_providers::Workdir::new(std::env::temp_dir());
        let render =
            |_: &std::path::Path, _: &str, _: &serde_json::Map<String, Value>| Ok(String::new());
        let cx = CallContext {
            dir: &dir,
            render: &render,
        };
        f(args.as_array().expect("an array of arguments"), &cx)
    }

    #[test]
    fn strings() {
        assert_eq!(
            run(split, json!([",", "subnet-1,subnet-2"])).unwrap(),
            json!(["subnet-1", "subnet-2"])
        );
        assert_eq!(run(split, json!([",", ""])).unwrap(), json!([]));
        assert_eq!(
            run(join, json!(["-", ["a", 2, true]])).unwrap(),
            json!("a-2-true")
        );
        assert!(
            run(join, json!(["-", [["x"]]]))
                .unwrap_err()
                .contains("item 0")
        );
        assert_eq!(
            run(replace, json!(["a.b.c", ".", "/"])).unwrap(),
            json!("a/b/c")
        );
        assert_eq!(
            run(|a, _| Ok(text(&a[0]).to_lowercase().into()), json!(["P4D"])).unwrap(),
            json!("p4d")
        );
        assert_eq!(
            run(|a, _| Ok(text(&a[0]).to_uppercase().into()), json!(["p5"])).unwrap(),
            json!("P5")
        );
        assert_eq!(run(trim, json!(["  x \n"])).unwrap(), json!("x"));
        assert_eq!(run(trim, json!(["--x--", "-"])).unwrap(), json!("x"));
    }

    #[test]
    fn format_verbs() {
        assert_eq!(
            run(
                format,
                json!([
                    "%s-%d nodes %.1f%% %q|%-4s|%4d",
                    "p5",
                    8,
                    99.25,
                    "x",
                    "ab",
                    7
                ])
            )
            .unwrap(),
            json!("p5-8 nodes 99.2% \"x\"|ab  |   7")
        );
        assert!(
            run(format, json!(["%s %s", "a"]))
                .unwrap_err()
                .contains("`%s` has no value")
        );
        assert!(
            run(format, json!(["%s", "a", "b"]))
                .unwrap_err()
                .contains("more values")
        );
        assert!(
            run(format, json!(["%d", "x"]))
                .unwrap_err()
                .contains("whole number")
        );
        assert!(run(format, json!(["%y", 1])).unwrap_err().contains("`%y`"));
    }
}
