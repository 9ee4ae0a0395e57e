//! Offline checks of a `cloudformation.stack` step: the template parses, the
//! parameters given match those it declares, and its EFA resources follow
//! the EFA rules ([`crate::efa::cfn`]).

use crate::Workdir;

use serde_json::Value;

use super::template::{self, Parameter};
use crate::contract::{DeclaredOutputs, InputValue, Problem};
use crate::suggest;

/// The largest template CloudFormation takes inline, in bytes.
pub(crate) const MAX_BODY: usize = 51_200;

/// The capabilities CloudFormation knows.
const CAPABILITIES: [&str; 3] = [
    "CAPABILITY_IAM",
    "CAPABILITY_NAMED_IAM",
    "CAPABILITY_AUTO_EXPAND",
];

/// The known value of input `name`, if it has one.
fn known<'a>(inputs: &'a [(String, InputValue)], name: &str) -> Option<&'a InputValue> {
    inputs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

/// The outputs a stack of this template will have: its `Outputs` (those
/// under a `Condition` may be absent), then `stack_name` and `stack_id`,
/// which flow adds. `None` when the template is not a readable local file
/// known before apply.
pub(crate) fn declared_outputs(
    inputs: &[(String, InputValue)],
    workdir: &Workdir,
) -> Option<DeclaredOutputs> {
    let Some(InputValue::Known(Value::String(path))) = known(inputs, "template") else {
        return None;
    };
    let text = std::fs::read_to_string(workdir.resolve(path).ok()?).ok()?;
    let parsed = template::parse(&text).ok()?;
    let mut out = DeclaredOutputs {
        source: format!("its template {path}"),
        ..DeclaredOutputs::default()
    };
    if let Some(Value::Object(outputs)) = parsed.get("Outputs") {
        for (key, output) in outputs {
            out.keys.push(key.clone());
            if output.get("Condition").is_some() {
                out.conditional.push(key.clone());
            }
        }
    }
    out.keys
        .extend(["stack_name".to_string(), "stack_id".to_string()]);
    Some(out)
}

/// The problems with a stack step's inputs; `workdir` is the workflow's folder.
pub(crate) fn problems(inputs: &[(String, InputValue)], workdir: &Workdir) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(InputValue::Known(Value::Array(caps))) = known(inputs, "capabilities") {
        for (i, cap) in caps.iter().enumerate() {
            if let Some(c) = cap.as_str().filter(|c| !CAPABILITIES.contains(c)) {
                let index = i.to_string();
                problems.push(
                    Problem::at_path(
                        &["capabilities", &index],
                        format!("`{c}` is not a CloudFormation capability"),
                    )
                    .with_help(format!("capabilities are {}", CAPABILITIES.join(", "))),
                );
            }
        }
    }
    let Some(InputValue::Known(Value::String(path))) = known(inputs, "template") else {
        return problems;
    };
    let full = match workdir.resolve(path) {
        Ok(full) => full,
        Err(why) => {
            problems.push(Problem::at("template", why));
            return problems;
        }
    };
    // A missing file is the engine's to report, with its own span.
    let Ok(bytes) = std::fs::read(full) else {
        return problems;
    };
    if bytes.len() > MAX_BODY {
        problems.push(Problem::at(
            "template",
            format!("template `{path}` is {} bytes; CloudFormation takes at most {MAX_BODY} bytes inline", bytes.len()),
        ).with_help("split the template into nested stacks, or shorten it"));
    }
    // Placeholders filled from values not known yet are checked at apply.
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    match crate::substitute::known_in(inputs) {
        Some(Ok(subs)) => {
            problems.extend(crate::substitute::check_texts(
                "template",
                &[(path.as_str(), text.as_str())],
                &subs,
            ));
            match subs.apply_yaml(&text) {
                Ok(filled) => text = filled,
                Err(m) => {
                    problems.push(Problem::at(
                        crate::substitute::INPUT,
                        format!("template `{path}`:{}: {}", m.line, m.message),
                    ));
                    return problems;
                }
            }
        }
        Some(Err(e)) => {
            problems.push(Problem::at(crate::substitute::INPUT, e.message));
            return problems;
        }
        None => {}
    }
    let parsed = match template::parse(&text) {
        Ok(t) => t,
        Err(e) => {
            problems.push(Problem::at("template", format!("template `{path}`: {e}")));
            return problems;
        }
    };
    if !parsed.get("Resources").is_some_and(Value::is_object) {
        problems.push(
            Problem::at(
                "template",
                format!("template `{path}` has no `Resources` section"),
            )
            .with_help(
                "a CloudFormation template declares at least one resource under `Resources:`",
            ),
        );
    }
    // EFA rules; a warning (no placement group) is the plan's to show.
    for f in crate::efa::cfn::check(path, &text, &parsed) {
        if !f.warning {
            problems.push(
                Problem::at("template", format!("{}: {}", f.place, f.message)).with_help(f.help),
            );
        }
    }
    let declared = template::parameters(&parsed);
    match known(inputs, "parameters") {
        Some(InputValue::Unknown) => {}
        Some(InputValue::Known(Value::Object(given))) => {
            problems.extend(parameter_problems(path, &declared, Some(given)));
        }
        Some(InputValue::Known(_)) => {}
        None => problems.extend(parameter_problems(path, &declared, None)),
    }
    problems
}

/// The EFA rules' warnings (an EFA compute environment without a placement
/// group) for the plan: `warning: FILE:LINE:COL: …; fix`. Offline; nothing
/// when the template cannot be read.
pub(crate) fn efa_warnings(
    inputs: &crate::contract::Values,
    workdir: &crate::file_input::Workdir,
) -> Vec<String> {
    let Some(path) = inputs.get("template").and_then(Value::as_str) else {
        return Vec::new();
    };
    let Some(text) = workdir
        .resolve(path)
        .ok()
        .and_then(|full| std::fs::read_to_string(full).ok())
    else {
        return Vec::new();
    };
    let text = match crate::substitute::Substitutions::from_values(inputs) {
        Ok(subs) => subs.apply(&text),
        Err(_) => text,
    };
    let Ok(parsed) = template::parse(&text) else {
        return Vec::new();
    };
    crate::efa::cfn::check(path, &text, &parsed)
        .into_iter()
        .filter(|f| f.warning)
        .map(|f| format!("warning: {}: {} ({})", f.place, f.message, f.help))
        .collect()
}

/// Parameters given but not declared, declared without a default but not
/// given, and values outside `AllowedValues`.
fn parameter_problems(
    path: &str,
    declared: &[Parameter],
    given: Option<&serde_json::Map<String, Value>>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let names = || declared.iter().map(|p| p.name.as_str());
    if let Some(given) = given {
        for (name, value) in given {
            let Some(param) = declared.iter().find(|p| &p.name == name) else {
                let help = match suggest::closest(name, names()) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None if declared.is_empty() => format!("`{path}` declares no parameters"),
                    None => format!("`{path}` declares {}", quoted(names())),
                };
                problems.push(
                    Problem::at_path(
                        &["parameters", name],
                        format!("parameter `{name}` is not declared by template `{path}`"),
                    )
                    .on_key()
                    .with_help(help),
                );
                continue;
            };
            if let (Some(allowed), Some(text)) =
                (&param.allowed, crate::aws::inputs::scalar_text(value))
                && !allowed.contains(&text)
            {
                problems.push(
                    Problem::at_path(
                        &["parameters", name],
                        format!("`{text}` is not an allowed value of parameter `{name}`"),
                    )
                    .with_help(format!(
                        "`{path}` allows {}",
                        quoted(allowed.iter().map(String::as_str))
                    )),
                );
            }
        }
    }
    let missing: Vec<&str> = declared
        .iter()
        .filter(|p| !p.has_default && !given.is_some_and(|g| g.contains_key(&p.name)))
        .map(|p| p.name.as_str())
        .collect();
    for name in missing {
        let at: &[&str] = if given.is_some() {
            &["parameters"]
        } else {
            &["template"]
        };
        problems.push(
            Problem::at_path(
                at,
                format!("parameter `{name}` of template `{path}` has no default and is not given"),
            )
            .with_help(format!(
                "set it in the step's `parameters`, e.g. parameters = {{ {name} = \"...\" }}"
            )),
        );
    }
    problems
}

/// `a`, `b` and `c` as text.
fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEMPLATE: &str = "Parameters:\n  VpcCidr:\n    Type: String\n    Default: 10.0.0.0/16\n  Env:\n    Type: String\n    AllowedValues: [dev, prod]\nResources:\n  Vpc:\n    Type: AWS::EC2::VPC\n    Properties:\n      CidrBlock: !Ref VpcCidr\n";

    fn check(params: Option<InputValue>) -> Vec<Problem> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vpc.yaml"), TEMPLATE).unwrap();
        let mut inputs = vec![
            ("stack_name".to_string(), InputValue::Known(json!("vpc"))),
            ("template".to_string(), InputValue::Known(json!("vpc.yaml"))),
        ];
        if let Some(p) = params {
            inputs.push(("parameters".into(), p));
        }
        problems(&inputs, &Workdir::new(dir.path()))
    }

    #[test]
    fn outputs_are_the_templates_and_flows_own() {
        let dir = tempfile::tempdir().unwrap();
        let template = "Conditions:\n  Two: !Equals [a, a]\nResources:\n  Vpc:\n    Type: AWS::EC2::VPC\nOutputs:\n  VPC:\n    Value: !Ref Vpc\n  Second:\n    Condition: Two\n    Value: x\n";
        std::fs::write(dir.path().join("vpc.yaml"), template).unwrap();
        let inputs = vec![("template".to_string(), InputValue::Known(json!("vpc.yaml")))];
        let declared = declared_outputs(&inputs, &Workdir::new(dir.path())).unwrap();
        assert_eq!(declared.keys, ["Second", "VPC", "stack_name", "stack_id"]);
        assert_eq!(declared.conditional, ["Second"]);
        assert_eq!(declared.source, "its template vpc.yaml");
        let unknown = vec![("template".to_string(), InputValue::Unknown)];
        assert_eq!(declared_outputs(&unknown, &Workdir::new(dir.path())), None);
    }

    #[test]
    fn good_parameters_pass() {
        assert!(check(Some(InputValue::Known(json!({"Env": "dev"})))).is_empty());
        assert!(check(Some(InputValue::Unknown)).is_empty());
    }

    #[test]
    fn undeclared_parameters_point_at_their_key() {
        let p = check(Some(InputValue::Known(
            json!({"Env": "dev", "VpcCdir": "x"}),
        )));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].path, ["parameters", "VpcCdir"]);
        assert!(p[0].on_key);
        assert_eq!(p[0].help.as_deref(), Some("did you mean `VpcCidr`?"));
    }

    #[test]
    fn missing_parameters_point_at_the_table_or_the_template() {
        let p = check(Some(InputValue::Known(json!({}))));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].path, ["parameters"]);
        assert!(p[0].message.contains("`Env`"), "{}", p[0].message);
        let p = check(None);
        assert_eq!(p[0].path, ["template"]);
    }

    #[test]
    fn values_outside_allowed_values_are_flagged() {
        let p = check(Some(InputValue::Known(json!({"Env": "test"}))));
        assert_eq!(p[0].path, ["parameters", "Env"]);
        assert!(!p[0].on_key);
    }

    #[test]
    fn broken_templates_and_capabilities_are_flagged() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "Resources:\n  A: !Nope x\n").unwrap();
        let inputs = vec![
            ("template".to_string(), InputValue::Known(json!("bad.yaml"))),
            (
                "capabilities".to_string(),
                InputValue::Known(json!(["CAPABILITY_IAM", "IAM"])),
            ),
        ];
        let p = problems(&inputs, &Workdir::new(dir.path()));
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].path, ["capabilities", "1"]);
        assert_eq!(p[1].path, ["template"]);
        assert!(p[1].message.contains("line 2"), "{}", p[1].message);
    }
}
