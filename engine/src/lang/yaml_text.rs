//! Inputs that are YAML text (an inline `manifest`, marked by the
//! provider's [`flow_providers::InputSpec::yaml`]): each `${…}` written in
//! them enters the text as a YAML scalar ([`flow_providers::yaml_fill`]),
//! so a variable holding `"x\n  hostNetwork: true"` is one string where it
//! is placed, never a key of its own. Other strings interpolate as text.

use serde_json::Value;

use super::ast::{Node, NodeKind, Part};
use super::expr::eval::{Taint, eval};
use super::resolve::{Evaluated, ResolveError, Scope};
use crate::diag::{Source, Span};
use flow_providers::yaml_fill::{self, Hole};

/// `node` evaluated in `scope` as YAML text; `source` is the file it is
/// written in, for naming each `${…}` in errors. A node that is not a
/// string with text around its expressions is evaluated as any value is.
pub fn evaluate(node: &Node, scope: &Scope, source: &Source) -> Result<Evaluated, ResolveError> {
    let NodeKind::Str(t) = &node.kind else {
        return super::resolve::evaluate(node, scope);
    };
    if t.single_expr().is_some() || t.parts.iter().all(|p| matches!(p, Part::Lit(_))) {
        return super::resolve::evaluate(node, scope);
    }
    let mut taint = Taint::default();
    let mut text = String::new();
    // Each expression's place in `text`, its name as written, its value,
    // and where it is written.
    let mut holes: Vec<(std::ops::Range<usize>, String, String, Span)> = Vec::new();
    let mut known = true;
    for part in &t.parts {
        match part {
            Part::Lit(s) => text.push_str(s),
            Part::Expr(e) => {
                let value = match eval(e, scope, &mut taint)? {
                    Some(Value::String(s)) => s,
                    Some(other) => other.to_string(),
                    None => {
                        known = false;
                        String::new()
                    }
                };
                let name = source
                    .text
                    .get(e.span.clone())
                    .map_or_else(|| "${…}".to_string(), str::to_string);
                // A stand-in the filler replaces; only its place matters.
                let at = text.len();
                text.push_str("${}");
                holes.push((at..text.len(), name, value, e.span.clone()));
            }
        }
    }
    let holes_written: Vec<Span> = holes.iter().map(|h| h.3.clone()).collect();
    let value = if known {
        let holes: Vec<Hole> = holes
            .iter()
            .map(|(range, name, value, _)| Hole {
                range: range.clone(),
                name,
                value,
            })
            .collect();
        let filled = yaml_fill::fill(&text, &holes).map_err(|m| ResolveError {
            code: "flow::bad-expression",
            message: m.message,
            span: holes_at(&holes_written, m.hole, node),
            help: None,
            source: None,
        })?;
        Some(Value::String(filled))
    } else {
        None
    };
    Ok(Evaluated {
        value,
        sensitive: taint.sensitive,
        derived: taint.derived,
    })
}

/// Where hole `k` is written (the whole string when unknown).
fn holes_at(written: &[Span], k: usize, node: &Node) -> Span {
    written.get(k).cloned().unwrap_or_else(|| node.span.clone())
}

#[cfg(test)]
mod tests {
    use crate::lang::load::load;
    use crate::lang::resolve::Lookup;
    use crate::lang::vars::VarInputs;
    use flow_providers::Registry;
    use serde_json::{Value, json};

    /// The inline `manifest` of step `cm` in a workflow whose variable
    /// `note` is `note`, resolved as apply would.
    fn manifest_with(note: &str, manifest: &str) -> Result<String, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(&path, workflow(note, manifest)).unwrap();
        let loaded = load(&path, &VarInputs::default(), &Registry::builtin(), &|_| {
            None
        })
        .map_err(|d| format!("{d:?}"))?;
        let step = loaded.workflow.step("cm").unwrap();
        let desired = loaded
            .resolve_inputs(step, b"salt", &|_, _| Lookup::Unknown)
            .map_err(|d| format!("{d:?}"))?;
        Ok(desired.actual["manifest"].as_str().unwrap().to_string())
    }

    /// The workflow [`manifest_with`] loads.
    fn workflow(note: &str, manifest: &str) -> String {
        format!(
            "[vars.note]\ndefault = {}\n\n[steps.cm]\nprovider = \"kube.manifest\"\n[steps.cm.inputs]\nkubeconfig = \"kc\"\nmanifest = \"\"\"\n{manifest}\"\"\"\n",
            serde_json::to_string(note).unwrap()
        )
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  note: ${vars.note}\n  script: |\n    echo \"${vars.note}\"\n";

    #[test]
    fn an_ordinary_value_is_pasted_as_before() {
        let out = manifest_with("hello", CM).unwrap();
        assert_eq!(out, CM.replace("${vars.note}", "hello"));
    }

    #[test]
    fn a_value_that_would_add_a_key_is_one_string() {
        let evil = "x\n  hostNetwork: true";
        let out = manifest_with(evil, CM).unwrap();
        let cm: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(cm["data"]["note"], evil, "{out}");
        assert_eq!(cm["data"]["script"], format!("echo \"{evil}\"\n"), "{out}");
        assert_eq!(cm["data"].as_object().unwrap().len(), 2, "{out}");
        assert_eq!(cm.get("hostNetwork"), None);
        assert_eq!(cm["metadata"], json!({"name": "notes"}));
    }

    #[test]
    fn a_value_that_cannot_be_placed_is_refused_at_the_manifest() {
        let folded = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  note: >\n    by ${vars.note}\n";
        let e = manifest_with("a\nb", folded).unwrap_err();
        assert!(
            e.contains("message: \"the value of `${vars.note}` has a line break"),
            "{e}"
        );
        // Pointed at the `${vars.note}` in the workflow file.
        let at = workflow("a\nb", folded).rfind("${vars.note}").unwrap();
        let label = format!("labels: [({at}..{}, \"here\")]", at + "${vars.note}".len());
        assert!(e.contains(&label), "{e}");
    }
}
