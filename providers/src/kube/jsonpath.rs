//! The part of kubectl's JSONPath that `wait_for` conditions use:
//! `{.status.phase}`, `.items[0].name`, `.status.conditions[?(@.type=="Ready")].status`.

use serde_json::Value;

/// The value at `path` in `doc` (the braces and leading `.` optional).
// A `String` error on purpose: the text is one problem, shown as it is
// at the step input's span; no caller tells its cases apart.
pub fn get<'a>(doc: &'a Value, path: &str) -> Result<Option<&'a Value>, String> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut cur = Some(doc);
    let mut rest = path;
    while !rest.is_empty() {
        let Some(node) = cur else { return Ok(None) };
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if key.is_empty() {
                return Err(format!("empty field name in `{path}`"));
            }
            cur = node.get(key);
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("unclosed `[` in `{path}`"))?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            cur = if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let (field, want) = filter
                    .split_once("==")
                    .ok_or_else(|| format!("only `==` filters are supported, in `{path}`"))?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                node.as_array().and_then(|items| {
                    items.iter().find(|i| {
                        i.get(field.trim()).is_some_and(|v| match v {
                            Value::String(s) => s == want,
                            Value::Number(n) => n.to_string() == want,
                            Value::Bool(b) => b.to_string() == want,
                            _ => false,
                        })
                    })
                })
            } else {
                let i: usize = inner
                    .parse()
                    .map_err(|_| format!("bad index `[{inner}]` in `{path}`"))?;
                node.get(i)
            };
        } else {
            return Err(format!("`{path}` must start with `.`"));
        }
    }
    Ok(cur)
}

/// A value as JSONPath prints it (strings bare).
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_indexes_and_filters() {
        let doc = json!({"status": {"phase": "Running", "replicas": 2, "conditions": [
            {"type": "Created", "status": "True"}, {"type": "Succeeded", "status": "False"}]}});
        assert_eq!(
            get(&doc, "{.status.phase}").unwrap(),
            Some(&json!("Running"))
        );
        assert_eq!(text(get(&doc, ".status.replicas").unwrap().unwrap()), "2");
        assert_eq!(
            get(&doc, ".status.conditions[1].type").unwrap(),
            Some(&json!("Succeeded"))
        );
        assert_eq!(
            get(
                &doc,
                r#"{.status.conditions[?(@.type=="Succeeded")].status}"#
            )
            .unwrap(),
            Some(&json!("False"))
        );
        assert_eq!(get(&doc, ".status.missing.deeper").unwrap(), None);
        assert!(get(&doc, "status").is_err());
        assert!(get(&doc, ".status[x]").is_err());
    }
}
