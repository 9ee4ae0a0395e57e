//! Load a workflow for a command: read, parse, check, resolve variables and
//! validate every input that is already known. All problems come back together.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flow_providers::{InputType, Provider, Registry, ValidateContext};

use super::ast::{Entry, Node, NodeKind, ProviderKind, StepDecl, Workflow};
use super::check::{Edge, check_output_keys, check_workflow};
use super::expand::{expand, instance_edges};
use super::inputs::{Desired, resolve_each, resolve_inputs};
use super::modules::expand_modules;
use super::parse::parse_workflow;
use super::providers::resolve_providers;
use super::resolve::{Context, Evaluated, Lookup, ResolveError, evaluate};
use super::vars::{VarInputs, VarValues, resolve_vars};
use crate::dag::Dag;
use crate::diag::{Diag, Diagnostics, Source, Span};

/// A workflow ready to plan.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The parsed workflow.
    pub workflow: Workflow,
    /// The dependency edges with the places that create them.
    pub edges: Vec<Edge>,
    /// The dependency graph.
    pub dag: Dag,
    /// Every variable's value.
    pub vars: VarValues,
    /// The workflow file's path as given.
    pub path: PathBuf,
    /// Text made from secrets by functions (`upper(vars.token)`) in values
    /// known before apply: masked as the secrets are.
    pub derived_secrets: Vec<String>,
}

impl Loaded {
    /// A redactor that masks every sensitive variable's value.
    pub fn redactor(&self) -> crate::secrets::Redactor {
        let redactor = crate::secrets::Redactor::default();
        for v in self.vars.values().filter(|v| v.sensitive) {
            redactor.add(&v.value);
        }
        for text in &self.derived_secrets {
            redactor.add(&serde_json::Value::String(text.clone()));
        }
        redactor
    }

    /// The provider kind of `step`, a step of this workflow: every step's
    /// provider was resolved when the workflow was loaded, and a workflow
    /// with an unknown one never loads.
    pub fn provider<'s>(&self, step: &'s StepDecl) -> &'s Arc<dyn Provider> {
        &step
            .kind
            .as_ref()
            .expect("every step of a loaded workflow has a known provider")
            .0
    }

    /// `step`'s inputs by the one resolver ([`resolve_inputs`]), with
    /// `outputs` giving earlier steps' outputs and secrets sealed with `legacy_salt`.
    pub fn resolve_inputs(
        &self,
        step: &StepDecl,
        legacy_salt: &[u8],
        outputs: &dyn Fn(&str, &str) -> Lookup,
    ) -> Result<Desired, Vec<Diag>> {
        resolve_inputs(
            &self.workflow,
            &self.vars,
            step,
            self.provider(step).as_ref(),
            legacy_salt,
            outputs,
        )
    }

    /// The AWS region of `step`: its own, else the workflow's (`None` leaves
    /// it to the SDK's chain).
    pub fn region_of(&self, step: &StepDecl) -> Option<String> {
        step.region.clone().or_else(|| self.workflow.region.clone())
    }

    /// A context for a provider call about `step` that nobody watches
    /// (planning, refresh, import), in `region`.
    pub fn unwatched_context(
        &self,
        step: &str,
        region: Option<String>,
    ) -> flow_providers::OpContext {
        let dir = match self.workflow.step(step) {
            Some(decl) => self.workflow.dir_of(decl).clone(),
            None => self.workflow.dir.clone(),
        };
        flow_providers::OpContext::unwatched(step, dir, region, self.workflow.profile.clone())
    }

    /// What `step` depends on directly, sorted.
    pub fn deps_of(&self, step: &str) -> Vec<String> {
        self.dag
            .needs(step)
            .into_iter()
            .map(str::to_string)
            .collect()
    }
}

/// Read and check the workflow at `path`, before anything of state is
/// known: a `for_each` over step outputs is deferred.
pub fn load(
    path: &Path,
    var_inputs: &VarInputs,
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, Diagnostics> {
    load_with(path, var_inputs, registry, env, &|_, _| Lookup::Unknown)
}

/// [`load`], with `outputs` giving the step outputs known now (state's, for
/// steps the plan leaves alone), so a `for_each` over them expands.
pub fn load_with(
    path: &Path,
    var_inputs: &VarInputs,
    registry: &Registry,
    env: &dyn Fn(&str) -> Option<String>,
    outputs: &dyn Fn(&str, &str) -> Lookup,
) -> Result<Loaded, Diagnostics> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        let mut d = Diagnostics::default();
        d.push(
            Diag::new(
                "flow::missing-file",
                format!("cannot read workflow {}: {e}", path.display()),
            )
            .help("check the path; workflow files are TOML"),
        );
        d
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let source = Source::new(path.display().to_string(), text);
    let (wf, mut diags) = parse_workflow(&source, &dir);
    let Some(mut wf) = wf else {
        return Err(diags);
    };
    diags.extend(expand_modules(&mut wf));
    diags.extend(resolve_providers(&mut wf, registry));
    let (edges, check_diags) = check_workflow(&wf);
    diags.extend(check_diags);
    let (vars, var_diags) = resolve_vars(&wf, var_inputs, env);
    diags.extend(var_diags);
    let mut edges = edges;
    let mut derived_secrets = Vec::new();
    if diags.is_empty() {
        let (instances, expand_diags) = expand(&mut wf, &vars, outputs);
        diags.extend(expand_diags);
        diags.extend(super::moved::check_moved(&wf));
        if (!instances.is_empty() || !wf.deferred.is_empty()) && diags.is_empty() {
            let (instance_edges, edge_diags) = instance_edges(&wf, &instances);
            edges = instance_edges;
            diags.extend(edge_diags);
        }
    }
    if diags.is_empty() {
        resolve_regions(&mut wf, &vars, &mut diags);
        // A deferred step is checked once its instances exist.
        let mut declared = std::collections::BTreeMap::new();
        for step in wf.steps.iter().filter(|s| !wf.is_deferred(&s.name)) {
            if let Some(outputs) =
                validate_known_inputs(&wf, step, &vars, &mut derived_secrets, &mut diags)
            {
                declared.insert(step.name.clone(), outputs);
            }
        }
        diags.extend(check_output_keys(&wf, &declared));
        derived_secrets.sort();
        derived_secrets.dedup();
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let dag = Dag::new(
        wf.steps.iter().map(|s| s.name.as_str()),
        edges.iter().map(|e| (e.from.as_str(), e.to.as_str())),
    );
    Ok(Loaded {
        workflow: wf,
        edges,
        dag,
        vars,
        path: path.to_path_buf(),
        derived_secrets,
    })
}

/// Regions written with variables (`region = "${vars.region}"`), now that
/// the variables are known. An empty value means no region of flow's: the
/// AWS SDK's chain (`AWS_REGION`, the profile) decides, as for the aws CLI.
fn resolve_regions(wf: &mut Workflow, vars: &VarValues, diags: &mut Diagnostics) {
    let no_outputs = |_: &str, _: &str| Lookup::Unknown;
    let problem = |node: &Node, source: &crate::diag::Source| {
        Diag::new(
            "flow::bad-reference",
            "a region or an ID to import must be text",
        )
        .in_source(source)
        .label(node.span.clone(), "here")
    };
    let text = |result: Result<Evaluated, ResolveError>,
                node: &Node,
                source: &crate::diag::Source,
                diags: &mut Diagnostics| {
        match result {
            Ok(e) => match e.value {
                Some(serde_json::Value::String(s)) => return (!s.is_empty()).then_some(s),
                _ => diags.push(problem(node, source)),
            },
            Err(e) => diags.push(e.to_diag(source)),
        }
        None
    };
    // Evaluated against the workflow as written, then set: no copy of it.
    let cx = Context {
        wf: &*wf,
        vars,
        outputs: &no_outputs,
    };
    let region = wf.region_node.as_ref().map(|node| {
        let result = cx.with_scope(None, None, |scope| evaluate(node, scope));
        text(result, node, &wf.source, diags)
    });
    let mut per_step = Vec::new();
    for (index, step) in wf.steps.iter().enumerate() {
        if wf.is_deferred(&step.name) || (step.region_node.is_none() && step.import_node.is_none())
        {
            continue;
        }
        let source = wf.source_of(step);
        let mut evaluated = |node: &Option<Node>| {
            node.as_ref()
                .map(|node| text(cx.evaluate(step, node), node, source, diags))
        };
        let region = evaluated(&step.region_node);
        let import = evaluated(&step.import_node);
        per_step.push((index, region, import));
    }
    if let Some(region) = region {
        wf.region = region;
    }
    for (index, region, import) in per_step {
        let step = &mut wf.steps[index];
        if let Some(region) = region {
            step.region = region;
        }
        if let Some(import) = import {
            step.import = import;
        }
    }
}

/// Check inputs whose values are known before apply: local files exist,
/// durations parse, and the provider's own offline checks pass. Text that
/// functions made from secrets goes to `derived_secrets`. Gives the
/// outputs the step will have, where its provider knows them now.
fn validate_known_inputs(
    wf: &Workflow,
    step: &StepDecl,
    vars: &VarValues,
    derived_secrets: &mut Vec<String>,
    diags: &mut Diagnostics,
) -> Option<flow_providers::DeclaredOutputs> {
    let Some(ProviderKind(provider)) = &step.kind else {
        return None;
    };
    let schema = provider.schema();
    let unknown_outputs = |_: &str, _: &str| Lookup::Unknown;
    let (desired, errors) = resolve_each(wf, vars, step, provider.as_ref(), &[], &unknown_outputs);
    errors.into_iter().for_each(|d| diags.push(d));
    derived_secrets.extend(desired.derived_secrets.iter().cloned());
    // Inputs found wrong here are not reported again by the provider (a
    // file outside the folder, which its own checks refuse too).
    let mut reported = std::collections::BTreeSet::new();
    for input in &step.inputs {
        if let (Some(v), Some(spec)) = (desired.actual.get(&input.key), schema.input(&input.key)) {
            let before = diags.items.len();
            check_known(wf, step, input, v, &spec.ty, diags);
            if diags.items.len() > before {
                reported.insert(input.key.clone());
            }
        }
    }
    let values = desired.into_input_values(step);
    let ctx = ValidateContext {
        workdir: wf.dir_of(step).clone(),
    };
    for problem in provider.validate(&values, &ctx) {
        if problem.path.first().is_some_and(|k| reported.contains(k)) {
            continue;
        }
        let span = span_of_path(step, &problem.path, problem.on_key);
        let mut d = Diag::new(
            "flow::invalid-input",
            format!("step `{}`: {}", step.name, problem.message),
        )
        .in_source(wf.source_of(step))
        .label(span, "rejected by the provider");
        if let Some(h) = problem.help {
            d = d.help(h);
        }
        diags.push(d);
    }
    provider.declared_outputs(&values, &ctx)
}

fn check_known(
    wf: &Workflow,
    step: &StepDecl,
    input: &Entry,
    value: &serde_json::Value,
    ty: &InputType,
    diags: &mut Diagnostics,
) {
    if !ty.accepts(value) {
        diags.push(
            Diag::new(
                "flow::wrong-type",
                format!(
                    "`{}` of step `{}` must be {}, found {}",
                    input.key,
                    step.name,
                    ty.describe(),
                    json_type(value)
                ),
            )
            .in_source(wf.source_of(step))
            .label(
                input.value.span.clone(),
                format!("expected {}", ty.describe()),
            ),
        );
        return;
    }
    let Some(s) = value.as_str() else { return };
    match ty {
        InputType::LocalFile => {
            let full = match wf.dir_of(step).resolve(s) {
                Ok(full) => full,
                Err(why) => {
                    diags.push(outside(wf.source_of(step), &input.value.span, why));
                    return;
                }
            };
            if !full.is_file() {
                diags.push(
                    Diag::new(
                        "flow::missing-file",
                        format!("file `{s}` does not exist (looked for {})", full.display()),
                    )
                    .in_source(wf.source_of(step))
                    .label(input.value.span.clone(), "no such file")
                    .help("paths are relative to the workflow file's folder"),
                );
            }
        }
        InputType::Duration => {
            if let Err(e) = humantime::parse_duration(s) {
                diags.push(
                    Diag::new(
                        "flow::bad-duration",
                        format!("`{s}` is not a duration: {e}"),
                    )
                    .in_source(wf.source_of(step))
                    .label(input.value.span.clone(), "not a duration")
                    .help("write a duration such as \"30s\", \"45m\" or \"1h 30m\""),
                );
            }
        }
        _ => {}
    }
}

/// The problem of a path outside the folders the workflow may read, at
/// `span`; `why` says which path, which folder and what to add.
pub fn outside(source: &crate::diag::Source, span: &Span, why: String) -> Diag {
    Diag::new("flow::path-outside", why)
        .in_source(source)
        .label(span.clone(), "outside the workflow's folder")
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "nothing",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a table",
    }
}

/// The span of an input path such as `["parameters", "VpcCidr"]`: the value
/// (or, with `on_key`, the key) of the deepest part found, else the step's inputs.
pub fn span_of_path(step: &StepDecl, path: &[String], on_key: bool) -> Span {
    let Some((first, rest)) = path.split_first() else {
        return step.name_span.clone();
    };
    let Some(entry) = step.inputs.iter().find(|e| &e.key == first) else {
        return step.inputs_span.clone();
    };
    let mut node: &Node = &entry.value;
    let mut span = if on_key && rest.is_empty() {
        entry.key_span.clone()
    } else {
        entry.value.span.clone()
    };
    for (i, part) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let next = match &node.kind {
            NodeKind::Table(entries) => entries
                .iter()
                .find(|e| &e.key == part)
                .map(|e| (&e.value, e.key_span.clone())),
            NodeKind::Array(items) => part
                .parse::<usize>()
                .ok()
                .and_then(|i| items.get(i))
                .map(|n| (n, n.span.clone())),
            _ => None,
        };
        match next {
            Some((n, key_span)) => {
                node = n;
                span = if on_key && last {
                    key_span
                } else {
                    n.span.clone()
                };
            }
            None => break,
        }
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str, flags: &[&str]) -> Result<Loaded, Diagnostics> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(&path, text).unwrap();
        let inputs = VarInputs {
            flags: flags.iter().map(|f| f.to_string()).collect(),
            ..VarInputs::default()
        };
        load(&path, &inputs, &Registry::builtin(), &|_| None)
    }

    const REGIONAL: &str = r#"
[vars.region]
default = ""
[workflow]
region = "${vars.region}"
[steps.a]
provider = "null"
region = "${vars.region}-x"
"#;

    #[test]
    fn a_region_may_come_from_a_variable() {
        let l = load_text(REGIONAL, &["region=eu-west-1"]).unwrap();
        assert_eq!(l.workflow.region.as_deref(), Some("eu-west-1"));
        assert_eq!(l.workflow.steps[0].region.as_deref(), Some("eu-west-1-x"));
        // Empty: the AWS SDK's chain decides.
        let l = load_text(REGIONAL, &[]).unwrap();
        assert_eq!(l.workflow.region, None);
    }

    const PER_SUBNET: &str = r#"
[steps.vpc]
provider = "null"
[steps.fsx]
provider = "null"
for_each = '${split(",", steps.vpc.outputs.subnets)}'
[steps.fsx.inputs]
subnet = "${each.key}"
[steps.train]
provider = "null"
[steps.train.inputs]
fs = '${steps.fsx["b"].outputs.subnet}'
"#;

    #[test]
    fn a_for_each_over_unknown_outputs_is_deferred_then_expanded_when_known() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wf.toml");
        std::fs::write(&path, PER_SUBNET).unwrap();
        let l = load(&path, &VarInputs::default(), &Registry::builtin(), &|_| {
            None
        })
        .unwrap();
        let waits: Vec<_> = l.workflow.deferred.iter().collect();
        assert_eq!(waits.len(), 1);
        assert_eq!(waits[0].0, "fsx");
        assert_eq!(waits[0].1.waits_on, ["vpc"]);
        // The unexpanded step waits for vpc, and train for it.
        assert_eq!(l.deps_of("fsx"), ["vpc"]);
        assert_eq!(l.deps_of("train"), ["fsx"]);

        let known = |step: &str, key: &str| match (step, key) {
            ("vpc", "subnets") => Lookup::Known(serde_json::json!("a,b")),
            _ => Lookup::Unknown,
        };
        let l = load_with(
            &path,
            &VarInputs::default(),
            &Registry::builtin(),
            &|_| None,
            &known,
        )
        .unwrap();
        assert!(l.workflow.deferred.is_empty());
        let names: Vec<&str> = l.workflow.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["vpc", r#"fsx["a"]"#, r#"fsx["b"]"#, "train"]);
        assert_eq!(l.deps_of(r#"fsx["a"]"#), ["vpc"]);
        assert_eq!(l.deps_of("train"), [r#"fsx["b"]"#]);
    }

    #[test]
    fn text_made_from_a_secret_is_masked_by_the_workflows_redactor() {
        let l = load_text(
            r#"
[vars.token]
sensitive = true
default = "hf_abcdefSECRET"
[steps.a]
provider = "null"
[steps.a.inputs]
shout = "${upper(vars.token)}"
"#,
            &[],
        )
        .unwrap();
        assert_eq!(l.derived_secrets, ["HF_ABCDEFSECRET"]);
        let said = l
            .redactor()
            .redact("refine saw HF_ABCDEFSECRET and hf_abcdefSECRET");
        assert!(!said.contains("SECRET"), "{said}");
    }

    #[test]
    fn a_region_cannot_come_from_a_step_output() {
        let err = load_text(
            "[steps.a]\nprovider = \"null\"\n[steps.b]\nprovider = \"null\"\nregion = \"${steps.a.outputs.r}\"\n",
            &[],
        )
        .map(|_| ())
        .unwrap_err();
        let text = format!("{err:?}");
        assert!(text.contains("cannot use step outputs"), "{text}");
    }
}
