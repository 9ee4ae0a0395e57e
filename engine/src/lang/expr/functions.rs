//! The standard library of functions an expression can call: what each
//! accepts (for the checks before anything runs) and what it does.

use base64::Engine as _;
use flow_providers::Workdir;
use serde_json::{Map, Value};

use super::call::whole;
pub use super::call::{CallContext, RenderTemplate, same, text};
use super::text::{format, join, replace, split, trim};
use super::ty::Ty;

/// One function.
pub struct Function {
    /// Its name.
    pub name: &'static str,
    /// How it is called, for messages: `split(separator, text)`.
    pub signature: &'static str,
    /// The types each parameter accepts; the last repeats when `variadic`.
    pub params: &'static [&'static [Ty]],
    /// How many arguments it needs at least.
    pub min: usize,
    /// Whether the last parameter repeats.
    pub variadic: bool,
    /// The type of its result.
    pub result: Ty,
    /// What it does, with its arguments known.
    pub run: fn(&[Value], &CallContext) -> Result<Value, String>,
}

impl Function {
    /// The types argument `i` may have.
    pub fn accepts(&self, i: usize) -> &'static [Ty] {
        match self.params.get(i) {
            Some(p) => p,
            None => self.params.last().copied().unwrap_or(&[Ty::Any]),
        }
    }
}

const S: &[Ty] = &[Ty::String];
const N: &[Ty] = &[Ty::Number];
const L: &[Ty] = &[Ty::List];
const T: &[Ty] = &[Ty::Table];
const ANY: &[Ty] = &[Ty::Any];
const SIZED: &[Ty] = &[Ty::List, Ty::Table, Ty::String];

macro_rules! function {
    ($name:literal, $sig:literal, [$($p:expr),*], $min:expr, $variadic:expr, $result:expr, $run:expr) => {
        Function {
            name: $name,
            signature: $sig,
            params: &[$($p),*],
            min: $min,
            variadic: $variadic,
            result: $result,
            run: $run,
        }
    };
}

/// Every function, by name.
pub static FUNCTIONS: &[Function] = &[
    function!(
        "split",
        "split(separator, text)",
        [S, S],
        2,
        false,
        Ty::List,
        split
    ),
    function!(
        "join",
        "join(separator, list)",
        [S, L],
        2,
        false,
        Ty::String,
        join
    ),
    function!(
        "format",
        "format(spec, values…)",
        [S, ANY],
        1,
        true,
        Ty::String,
        format
    ),
    function!(
        "replace",
        "replace(text, search, replacement)",
        [S, S, S],
        3,
        false,
        Ty::String,
        replace
    ),
    function!(
        "lower",
        "lower(text)",
        [S],
        1,
        false,
        Ty::String,
        |a, _| Ok(text(&a[0]).to_lowercase().into())
    ),
    function!(
        "upper",
        "upper(text)",
        [S],
        1,
        false,
        Ty::String,
        |a, _| Ok(text(&a[0]).to_uppercase().into())
    ),
    function!(
        "trim",
        "trim(text[, characters])",
        [S, S],
        1,
        false,
        Ty::String,
        trim
    ),
    function!(
        "length",
        "length(list, table or text)",
        [SIZED],
        1,
        false,
        Ty::Number,
        length
    ),
    function!(
        "element",
        "element(list, index)",
        [L, N],
        2,
        false,
        Ty::Any,
        element
    ),
    function!("concat", "concat(lists…)", [L], 1, true, Ty::List, concat),
    function!("merge", "merge(tables…)", [T], 1, true, Ty::Table, merge),
    function!(
        "lookup",
        "lookup(table, key[, default])",
        [T, S, ANY],
        2,
        false,
        Ty::Any,
        lookup
    ),
    function!("keys", "keys(table)", [T], 1, false, Ty::List, |a, _| Ok(
        sorted(&a[0])
            .map(|(k, _)| Value::from(k.as_str()))
            .collect()
    )),
    function!(
        "values",
        "values(table)",
        [T],
        1,
        false,
        Ty::List,
        |a, _| Ok(sorted(&a[0]).map(|(_, v)| v.clone()).collect())
    ),
    function!(
        "range",
        "range([start,] end[, step])",
        [N, N, N],
        1,
        false,
        Ty::List,
        range
    ),
    function!("one", "one(list)", [L], 1, false, Ty::Any, one),
    function!(
        "contains",
        "contains(list, value)",
        [L, ANY],
        2,
        false,
        Ty::Bool,
        contains
    ),
    function!(
        "base64encode",
        "base64encode(text)",
        [S],
        1,
        false,
        Ty::String,
        |a, _| Ok(base64::engine::general_purpose::STANDARD
            .encode(text(&a[0]))
            .into())
    ),
    function!(
        "base64decode",
        "base64decode(text)",
        [S],
        1,
        false,
        Ty::String,
        base64decode
    ),
    function!(
        "jsonencode",
        "jsonencode(value)",
        [ANY],
        1,
        false,
        Ty::String,
        |a, _| serde_json::to_string(&a[0])
            .map(Value::from)
            .map_err(|e| e.to_string())
    ),
    function!(
        "yamlencode",
        "yamlencode(value)",
        [ANY],
        1,
        false,
        Ty::String,
        |a, _| serde_saphyr::to_string(&a[0])
            .map(Value::from)
            .map_err(|e| e.to_string())
    ),
    function!("file", "file(path)", [S], 1, false, Ty::String, |a, cx| {
        read(cx.dir, &text(&a[0])).map(|(_, t)| Value::from(t))
    }),
    function!(
        "templatefile",
        "templatefile(path, names)",
        [S, T],
        2,
        false,
        Ty::String,
        templatefile
    ),
];

/// The function called `name`.
pub fn find(name: &str) -> Option<&'static Function> {
    FUNCTIONS.iter().find(|f| f.name == name)
}

/// Every function's name.
pub fn names() -> impl Iterator<Item = &'static str> + Clone {
    FUNCTIONS.iter().map(|f| f.name)
}

fn sorted(v: &Value) -> impl Iterator<Item = (&String, &Value)> {
    let mut entries: Vec<_> = v.as_object().into_iter().flatten().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.into_iter()
}

fn length(a: &[Value], _: &CallContext) -> Result<Value, String> {
    Ok(match &a[0] {
        Value::Array(v) => v.len(),
        Value::Object(m) => m.len(),
        Value::String(s) => s.chars().count(),
        other => return Err(format!("length needs a list, a table or text, not {other}")),
    }
    .into())
}

fn element(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let items = a[0].as_array().ok_or("the first argument must be a list")?;
    let i = whole(&a[1], "the index")?;
    if items.is_empty() {
        return Err("the list is empty".into());
    }
    if i < 0 {
        return Err(format!("the index is {i}; it cannot be negative"));
    }
    Ok(items[i as usize % items.len()].clone())
}

fn concat(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let mut out = Vec::new();
    for (i, v) in a.iter().enumerate() {
        let items = v
            .as_array()
            .ok_or_else(|| format!("argument {} is not a list", i + 1))?;
        out.extend(items.iter().cloned());
    }
    Ok(Value::Array(out))
}

fn merge(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let mut out = Map::new();
    for (i, v) in a.iter().enumerate() {
        let m = v
            .as_object()
            .ok_or_else(|| format!("argument {} is not a table", i + 1))?;
        out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(Value::Object(out))
}

fn lookup(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let m = a[0]
        .as_object()
        .ok_or("the first argument must be a table")?;
    let key = text(&a[1]);
    match (m.get(&key), a.get(2)) {
        (Some(v), _) => Ok(v.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => {
            let mut keys: Vec<&str> = m.keys().map(String::as_str).collect();
            keys.sort();
            Err(format!(
                "the table has no key `{key}` (it has: {}); give a default as the third argument",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                }
            ))
        }
    }
}

/// At most this many numbers come out of `range`.
const RANGE_LIMIT: i64 = 1_000_000;

fn range(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let n: Vec<i64> = a
        .iter()
        .map(|v| whole(v, "each argument of range"))
        .collect::<Result<_, _>>()?;
    let (start, end, step) = match n.as_slice() {
        [end] => (0, *end, 1),
        [start, end] => (*start, *end, if end >= start { 1 } else { -1 }),
        [start, end, step] => (*start, *end, *step),
        _ => unreachable!("arity is checked before the call"),
    };
    if step == 0 {
        return Err("the step is 0, so the range would never end".into());
    }
    if (i128::from(end) - i128::from(start)) / i128::from(step) > i128::from(RANGE_LIMIT) {
        return Err(format!("the range has more than {RANGE_LIMIT} numbers"));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        out.push(Value::from(i));
        match i.checked_add(step) {
            Some(next) => i = next,
            None => break,
        }
    }
    Ok(Value::Array(out))
}

/// The one item of a list of at most one, `null` for an empty one: the
/// output of a step whose `for_each` makes zero or one instance,
/// `one(steps.eks[*].outputs.connection)`.
fn one(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let items = a[0].as_array().ok_or("the argument must be a list")?;
    match items.as_slice() {
        [] => Ok(Value::Null),
        [only] => Ok(only.clone()),
        more => Err(format!(
            "the list has {} items; one() takes a list of zero or one",
            more.len()
        )),
    }
}

fn contains(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let items = a[0].as_array().ok_or("the first argument must be a list")?;
    Ok(items.iter().any(|v| same(v, &a[1])).into())
}

fn base64decode(a: &[Value], _: &CallContext) -> Result<Value, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text(&a[0]).trim())
        .map_err(|e| format!("not valid base64: {e}"))?;
    String::from_utf8(bytes)
        .map(Value::from)
        .map_err(|_| "the decoded bytes are not UTF-8 text".into())
}

/// Read `path` (relative to `dir`, inside the folders it allows) as text:
/// the full path and the text.
fn read(dir: &Workdir, path: &str) -> Result<(std::path::PathBuf, String), String> {
    let full = dir.resolve(path)?;
    let text = std::fs::read_to_string(&full).map_err(|e| {
        format!("cannot read `{path}` (looked for {}): {e}; paths are relative to the workflow file's folder", full.display())
    })?;
    Ok((full, text))
}

fn templatefile(a: &[Value], cx: &CallContext) -> Result<Value, String> {
    let (full, body) = read(cx.dir, &text(&a[0]))?;
    let names = a[1]
        .as_object()
        .ok_or("the second argument must be a table of names")?;
    (cx.render)(&full, &body, names).map(Value::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Call the function `name` with the arguments in the JSON array `args`.
    fn call(name: &str, args: Value) -> Result<Value, String> {
        let dir = Workdir::new(std::env::temp_dir());
        let render = |_: &std::path::Path, body: &str, names: &Map<String, Value>| {
            Ok(format!("{body}:{}", names.len()))
        };
        let cx = CallContext {
            dir: &dir,
            render: &render,
        };
        let args = args.as_array().unwrap().clone();
        (find(name).unwrap().run)(&args, &cx)
    }

    #[test]
    fn collections() {
        assert_eq!(call("length", json!([[1, 2, 3]])).unwrap(), json!(3));
        assert_eq!(call("length", json!([{"a": 1}])).unwrap(), json!(1));
        assert_eq!(call("length", json!(["héllo"])).unwrap(), json!(5));
        assert_eq!(call("element", json!([["a", "b"], 3])).unwrap(), json!("b"));
        assert!(call("element", json!([[], 0])).is_err());
        assert_eq!(
            call("concat", json!([[1], [2, 3]])).unwrap(),
            json!([1, 2, 3])
        );
        assert_eq!(
            call("merge", json!([{"a": 1, "b": 1}, {"b": 2}])).unwrap(),
            json!({"a": 1, "b": 2})
        );
        assert_eq!(call("lookup", json!([{"a": 1}, "b", 0])).unwrap(), json!(0));
        let e = call("lookup", json!([{"a": 1}, "b"])).unwrap_err();
        assert!(e.contains("no key `b` (it has: a)"), "{e}");
        assert_eq!(
            call("keys", json!([{"b": 1, "a": 2}])).unwrap(),
            json!(["a", "b"])
        );
        assert_eq!(
            call("values", json!([{"b": 1, "a": 2}])).unwrap(),
            json!([2, 1])
        );
        assert_eq!(call("range", json!([3])).unwrap(), json!([0, 1, 2]));
        assert_eq!(call("range", json!([1, 9, 3])).unwrap(), json!([1, 4, 7]));
        assert_eq!(call("range", json!([3, 0])).unwrap(), json!([3, 2, 1]));
        assert!(call("range", json!([0, 5, 0])).is_err());
        assert!(call("range", json!([0, 1e12])).is_err());
        assert!(call("range", json!([-1, i64::MAX])).is_err());
        assert_eq!(
            call("range", json!([i64::MAX - 1, i64::MAX, 2])).unwrap(),
            json!([i64::MAX - 1])
        );
        assert_eq!(call("contains", json!([[2, 4], 4.0])).unwrap(), json!(true));
        assert_eq!(call("contains", json!([["a"], "b"])).unwrap(), json!(false));
        assert_eq!(call("one", json!([[]])).unwrap(), json!(null));
        assert_eq!(call("one", json!([["x"]])).unwrap(), json!("x"));
        let e = call("one", json!([["x", "y"]])).unwrap_err();
        assert!(e.contains("has 2 items"), "{e}");
    }

    #[test]
    fn encodings() {
        assert_eq!(
            call("base64encode", json!(["hf_abc"])).unwrap(),
            json!("aGZfYWJj")
        );
        assert_eq!(
            call("base64decode", json!(["aGZfYWJj"])).unwrap(),
            json!("hf_abc")
        );
        assert!(
            call("base64decode", json!(["!!"]))
                .unwrap_err()
                .contains("base64")
        );
        assert_eq!(
            call("jsonencode", json!([{"a": [1, "x"]}])).unwrap(),
            json!(r#"{"a":[1,"x"]}"#)
        );
        let yaml = call("yamlencode", json!([{"a": [1, "x"]}])).unwrap();
        let back: Value = serde_saphyr::from_str(yaml.as_str().unwrap()).unwrap();
        assert_eq!(back, json!({"a": [1, "x"]}));
    }

    #[test]
    fn files_resolve_against_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.txt"), "hello").unwrap();
        let render = |p: &std::path::Path, body: &str, names: &Map<String, Value>| {
            Ok(format!(
                "{}|{body}|{}",
                p.file_name().unwrap().to_string_lossy(),
                names.len()
            ))
        };
        let cx = CallContext {
            dir: &dir.path().into(),
            render: &render,
        };
        let file = find("file").unwrap();
        assert_eq!((file.run)(&[json!("t.txt")], &cx).unwrap(), json!("hello"));
        let e = (file.run)(&[json!("nope.txt")], &cx).unwrap_err();
        assert!(e.contains("cannot read `nope.txt`"), "{e}");
        let tf = find("templatefile").unwrap();
        assert_eq!(
            (tf.run)(&[json!("t.txt"), json!({"a": 1})], &cx).unwrap(),
            json!("t.txt|hello|1")
        );
    }

    #[test]
    fn every_function_has_a_consistent_signature() {
        for f in FUNCTIONS {
            assert!(
                f.signature.starts_with(&format!("{}(", f.name)),
                "{}",
                f.name
            );
            assert!(f.min <= f.params.len(), "{}", f.name);
        }
    }
}
