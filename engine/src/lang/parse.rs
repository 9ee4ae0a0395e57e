//! Spanned TOML entries → a [`Workflow`], reporting every structural problem.

use std::path::Path;

use super::ast::{
    Entry, Node, NodeKind, RefTarget, StepDecl, VarDecl, VarType, Workflow, base_name,
};
use super::template::is_name;
use super::toml_nodes::{parse_document, type_name};
use crate::diag::{Diag, Diagnostics, Source, Span};

/// How many times a step retries an error its provider marks retryable
/// (throttling, 5xx) when the workflow does not say: cloud APIs are flaky.
pub const DEFAULT_RETRIES: u32 = 3;

mod workflow_table;

/// Parse a workflow file's text. The workflow is returned whenever the TOML
/// itself parsed, so that later checks can report more problems in one run.
pub fn parse_workflow(source: &Source, dir: &Path) -> (Option<Workflow>, Diagnostics) {
    parse_file(source, dir, false)
}

/// Parse one file of a module's folder: `[inputs.NAME]` (declared like
/// variables), `[steps.NAME]`, `[outputs]` and `[modules.NAME]`.
pub fn parse_module_file(source: &Source, dir: &Path) -> (Option<Workflow>, Diagnostics) {
    parse_file(source, dir, true)
}

fn parse_file(source: &Source, dir: &Path, module: bool) -> (Option<Workflow>, Diagnostics) {
    let (entries, mut diags) = parse_document(source);
    if diags
        .items
        .iter()
        .any(|d| matches!(d.code, "flow::toml-syntax" | "flow::duplicate-name"))
    {
        return (None, diags);
    }
    let stem = Path::new(&source.name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "workflow".into());
    let mut wf = Workflow {
        source: source.clone(),
        dir: flow_providers::Workdir::new(dir),
        name: stem,
        description: None,
        region: None,
        region_node: None,
        profile: None,
        state: None,
        vars: Vec::new(),
        steps: Vec::new(),
        moved: Vec::new(),
        modules: Vec::new(),
        outputs: Vec::new(),
        module_outputs: Default::default(),
        deferred: Default::default(),
        step_index: Default::default(),
    };
    let mut p = Parser {
        source,
        diags: &mut diags,
    };
    let known: &[&str] = if module {
        &["inputs", "steps", "outputs", "modules"]
    } else {
        &["workflow", "vars", "steps", "modules", "moved"]
    };
    for entry in &entries {
        match (entry.key.as_str(), module) {
            ("workflow", false) => p.workflow_table(entry, &mut wf),
            ("vars", false) => wf.vars = p.each_table(entry, "vars", Parser::var),
            ("inputs", true) => wf.vars = p.each_table(entry, "inputs", Parser::var),
            ("steps", _) => wf.steps = p.each_table(entry, "steps", Parser::step),
            ("moved", false) => wf.moved = super::moved::parse_moved(source, p.diags, &entry.value),
            ("modules", _) => {
                wf.modules = super::module_call::parse_calls(source, p.diags, &entry.value)
            }
            ("outputs", true) => {
                if let Some(entries) = p.table(&entry.value, "[outputs]") {
                    wf.outputs = entries.to_vec();
                }
            }
            (other, _) => p.unknown_key(
                entry,
                other,
                known,
                if module {
                    "a module file"
                } else {
                    "the top level"
                },
            ),
        }
    }
    wf.index_steps();
    (Some(wf), diags)
}

struct Parser<'a> {
    source: &'a Source,
    diags: &'a mut Diagnostics,
}

impl Parser<'_> {
    fn err(
        &mut self,
        code: &'static str,
        msg: String,
        span: Span,
        label: &str,
        help: Option<String>,
    ) {
        let mut d = Diag::new(code, msg)
            .in_source(self.source)
            .label(span, label);
        if let Some(h) = help {
            d = d.help(h);
        }
        self.diags.push(d);
    }

    fn unknown_key(&mut self, entry: &Entry, key: &str, known: &[&str], place: &str) {
        let help = match flow_providers::suggest::closest(key, known.iter().copied()) {
            Some(s) => format!("did you mean `{s}`? Known keys here: {}", known.join(", ")),
            None => format!("known keys here: {}", known.join(", ")),
        };
        self.err(
            "flow::unknown-key",
            format!("unknown key `{key}` in {place}"),
            entry.key_span.clone(),
            "not recognised",
            Some(help),
        );
    }

    fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
        self.err(
            "flow::wrong-type",
            format!("{what} must be {expected}, found {}", type_name(node)),
            node.span.clone(),
            &format!("expected {expected}"),
            None,
        );
    }

    fn table<'e>(&mut self, node: &'e Node, what: &str) -> Option<&'e [Entry]> {
        match &node.kind {
            NodeKind::Table(entries) => Some(entries),
            _ => {
                self.wrong_type(node, what, "a table");
                None
            }
        }
    }

    fn string(&mut self, node: &Node, what: &str) -> Option<String> {
        match &node.kind {
            NodeKind::Str(t) => match t.as_literal() {
                Some(s) => Some(s),
                None => {
                    self.err(
                        "flow::reference-not-allowed",
                        format!("{what} cannot contain references"),
                        node.span.clone(),
                        "write a plain value here",
                        Some("only step inputs are interpolated; write a plain value here".into()),
                    );
                    None
                }
            },
            _ => {
                self.wrong_type(node, what, "a string");
                None
            }
        }
    }

    /// A region: a plain string, or one that uses variables only (resolved
    /// by `load` once they are known). Step outputs cannot choose a region:
    /// the plan needs it before anything is applied.
    fn region(&mut self, node: &Node, what: &str) -> (Option<String>, Option<Node>) {
        self.plan_time_string(
            node,
            what,
            "the region is needed to plan, before any step runs: use a variable (${vars.region})",
        )
    }

    /// A string known before any step runs: plain, or made of variables
    /// (returned as the node, resolved once the variables are known); step
    /// outputs are refused with `why`.
    fn plan_time_string(
        &mut self,
        node: &Node,
        what: &str,
        why: &str,
    ) -> (Option<String>, Option<Node>) {
        let NodeKind::Str(t) = &node.kind else {
            self.wrong_type(node, what, "a string");
            return (None, None);
        };
        if let Some(s) = t.as_literal() {
            return (Some(s), None);
        }
        let mut ok = true;
        for r in t.refs() {
            if matches!(r.target, RefTarget::Output { .. }) {
                self.err(
                    "flow::reference-not-allowed",
                    format!("{what} cannot use step outputs"),
                    r.span.clone(),
                    "a step output",
                    Some(why.into()),
                );
                ok = false;
            }
        }
        (None, ok.then(|| node.clone()))
    }

    fn bool(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.kind {
            NodeKind::Bool(b) => Some(b),
            _ => {
                self.wrong_type(node, what, "a boolean");
                None
            }
        }
    }

    fn each_table<T>(
        &mut self,
        entry: &Entry,
        what: &str,
        item: fn(&mut Self, &Entry, &[Entry]) -> Option<T>,
    ) -> Vec<T> {
        let Some(entries) = self.table(&entry.value, &format!("[{what}]")) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries {
            if !is_name(&e.key) {
                self.err(
                    "flow::bad-name",
                    format!("`{}` is not a valid name", e.key),
                    e.key_span.clone(),
                    "invalid name",
                    Some(
                        "names start with a letter or `_` and contain letters, digits, `_` and `-`"
                            .into(),
                    ),
                );
                continue;
            }
            let Some(fields) = self.table(&e.value, &format!("{what}.{}", e.key)) else {
                continue;
            };
            if let Some(t) = item(self, e, fields) {
                out.push(t);
            }
        }
        out
    }

    fn var(&mut self, entry: &Entry, fields: &[Entry]) -> Option<VarDecl> {
        let mut var = VarDecl {
            name: entry.key.clone(),
            name_span: entry.key_span.clone(),
            default: None,
            description: None,
            ty: VarType::String,
            sensitive: false,
            env: None,
            broken: false,
        };
        let mut declared_type = false;
        let errors_before = self.diags.items.len();
        for f in fields {
            let what = format!("vars.{}.{}", entry.key, f.key);
            match f.key.as_str() {
                "default" => var.default = Some(f.value.clone()),
                "description" => var.description = self.string(&f.value, &what),
                "sensitive" => var.sensitive = self.bool(&f.value, &what).unwrap_or(false),
                "env" => var.env = self.string(&f.value, &what),
                "type" => {
                    if let Some(s) = self.string(&f.value, &what) {
                        match VarType::parse(&s) {
                            Some(t) => {
                                var.ty = t;
                                declared_type = true;
                            }
                            None => self.err(
                                "flow::unknown-type",
                                format!("unknown variable type `{s}`"),
                                f.value.span.clone(),
                                "not a type",
                                Some(
                                    "types: string, integer, number, bool, list, table, any".into(),
                                ),
                            ),
                        }
                    }
                }
                other => self.unknown_key(
                    f,
                    other,
                    &["default", "description", "type", "sensitive", "env"],
                    &format!("[vars.{}]", entry.key),
                ),
            }
        }
        var.broken = self.diags.items.len() > errors_before;
        if !declared_type && let Some(d) = &var.default {
            var.ty = infer_type(d);
        }
        if let Some(d) = &var.default {
            if let Some(e) = d.exprs().first() {
                self.err(
                    "flow::reference-not-allowed",
                    format!("the default of `{}` cannot contain `${{…}}`", var.name),
                    e.span.clone(),
                    "an expression in a default",
                    Some(
                        "defaults are plain values; use the reference where the variable is used"
                            .into(),
                    ),
                );
            } else if !node_matches(var.ty, d) {
                self.err(
                    "flow::wrong-type",
                    format!(
                        "the default of `{}` must be {}, found {}",
                        var.name,
                        var_type_phrase(var.ty),
                        type_name(d)
                    ),
                    d.span.clone(),
                    &format!("expected {}", var_type_phrase(var.ty)),
                    None,
                );
            }
        }
        Some(var)
    }

    fn step(&mut self, entry: &Entry, fields: &[Entry]) -> Option<StepDecl> {
        let mut step = StepDecl {
            name: entry.key.clone(),
            name_span: entry.key_span.clone(),
            provider: String::new(),
            provider_span: entry.key_span.clone(),
            depends_on: Vec::new(),
            timeout: None,
            retries: DEFAULT_RETRIES,
            prevent_destroy: false,
            create_before_destroy: None,
            region: None,
            region_node: None,
            import: None,
            import_node: None,
            import_span: None,
            inputs: Vec::new(),
            inputs_span: entry.key_span.clone(),
            broken: false,
            for_each: None,
            instance: None,
            module: None,
            source: None,
            kind: None,
        };
        let mut has_provider = false;
        let errors_before = self.diags.items.len();
        for f in fields {
            let what = format!("steps.{}.{}", entry.key, f.key);
            match f.key.as_str() {
                "provider" => {
                    step.provider_span = f.value.span.clone();
                    match self.string(&f.value, &what) {
                        Some(p) if p.trim().is_empty() => self.err(
                            "flow::missing-provider",
                            format!("step `{}` has an empty provider", entry.key),
                            f.value.span.clone(),
                            "empty",
                            Some("name a provider, e.g. `provider = \"exec\"`".into()),
                        ),
                        Some(p) => {
                            step.provider = p;
                            has_provider = true;
                        }
                        None => {}
                    }
                }
                "depends_on" => match &f.value.kind {
                    NodeKind::Array(items) => {
                        for item in items {
                            if !matches!(item.kind, NodeKind::Str(_)) {
                                self.wrong_type(
                                    item,
                                    &format!("each item of {what}"),
                                    "a step name (a string)",
                                );
                            } else if let Some(s) = self.string(item, &what) {
                                step.depends_on.push((s, item.span.clone()));
                            }
                        }
                    }
                    _ => self.wrong_type(&f.value, &what, "an array of step names"),
                },
                "timeout" => {
                    if let Some(s) = self.string(&f.value, &what) {
                        match humantime::parse_duration(&s) {
                            Ok(d) if !d.is_zero() => step.timeout = Some(d),
                            Ok(_) => self.err(
                                "flow::bad-duration",
                                "a timeout must be longer than zero".into(),
                                f.value.span.clone(),
                                "zero",
                                Some("write a duration such as \"45m\" or \"1h 30m\"".into()),
                            ),
                            Err(e) => self.err(
                                "flow::bad-duration",
                                format!("`{s}` is not a duration: {e}"),
                                f.value.span.clone(),
                                "not a duration",
                                Some(
                                    "write a duration such as \"30s\", \"45m\" or \"1h 30m\""
                                        .into(),
                                ),
                            ),
                        }
                    }
                }
                "retries" => match f.value.kind {
                    NodeKind::Int(n) if (0..=100).contains(&n) => step.retries = n as u32,
                    NodeKind::Int(_) => self.err(
                        "flow::out-of-range",
                        "retries must be between 0 and 100".into(),
                        f.value.span.clone(),
                        "out of range",
                        None,
                    ),
                    _ => self.wrong_type(&f.value, &what, "an integer"),
                },
                "region" => (step.region, step.region_node) = self.region(&f.value, &what),
                "import" => {
                    step.import_span = Some(f.value.span.clone());
                    (step.import, step.import_node) = self.plan_time_string(
                        &f.value,
                        &what,
                        "the ID to import is needed to plan, before any step runs: use a variable (${vars.vpc_stack})",
                    );
                }
                "lifecycle" => {
                    if let Some(items) = self.table(&f.value, &what) {
                        for l in items {
                            match l.key.as_str() {
                                "prevent_destroy" => {
                                    step.prevent_destroy = self
                                        .bool(&l.value, &format!("{what}.prevent_destroy"))
                                        .unwrap_or(false)
                                }
                                "create_before_destroy" => {
                                    step.create_before_destroy = self
                                        .bool(&l.value, &format!("{what}.create_before_destroy"))
                                        .map(|b| (b, l.value.span.clone()))
                                }
                                other => self.unknown_key(
                                    l,
                                    other,
                                    &["prevent_destroy", "create_before_destroy"],
                                    &format!("[steps.{}.lifecycle]", entry.key),
                                ),
                            }
                        }
                    }
                }
                "for_each" => {
                    // Outputs of other steps are fine: the step is deferred
                    // until they are known. Its own never will be.
                    for r in f.value.refs() {
                        if matches!(&r.target, RefTarget::Output { step, .. } if base_name(step) == entry.key)
                        {
                            self.err(
                                "flow::reference-not-allowed",
                                format!("{what} cannot use the step's own outputs"),
                                r.span.clone(),
                                "its own output",
                                Some("the keys decide which instances exist, so they must come from variables or other steps' outputs".into()),
                            );
                        }
                    }
                    step.for_each = Some(f.value.clone());
                }
                "inputs" => match self.table(&f.value, &what) {
                    Some(items) => {
                        step.inputs = items.to_vec();
                        step.inputs_span = f.key_span.clone();
                    }
                    None => step.broken = true,
                },
                other => self.unknown_key(
                    f,
                    other,
                    &[
                        "provider",
                        "depends_on",
                        "timeout",
                        "retries",
                        "region",
                        "import",
                        "lifecycle",
                        "for_each",
                        "inputs",
                    ],
                    &format!("[steps.{}]", entry.key),
                ),
            }
        }
        step.broken |= self.diags.items.len() > errors_before;
        if !has_provider && !fields.iter().any(|f| f.key == "provider") {
            self.err(
                "flow::missing-provider",
                format!("step `{}` has no provider", entry.key),
                entry.key_span.clone(),
                "this step",
                Some(format!(
                    "add `provider = \"...\"` under [steps.{}]",
                    entry.key
                )),
            );
        }
        Some(step)
    }
}

/// The type a default value implies when no `type` is declared.
fn infer_type(node: &Node) -> VarType {
    match node.kind {
        NodeKind::Str(_) | NodeKind::Datetime(_) => VarType::String,
        NodeKind::Int(_) => VarType::Integer,
        NodeKind::Float(_) => VarType::Number,
        NodeKind::Bool(_) => VarType::Bool,
        NodeKind::Array(_) => VarType::List,
        NodeKind::Table(_) => VarType::Table,
    }
}

/// Whether a written value fits a variable type.
pub fn node_matches(ty: VarType, node: &Node) -> bool {
    matches!(
        (ty, &node.kind),
        (VarType::Any, _)
            | (VarType::String, NodeKind::Str(_) | NodeKind::Datetime(_))
            | (VarType::Integer, NodeKind::Int(_))
            | (VarType::Number, NodeKind::Int(_) | NodeKind::Float(_))
            | (VarType::Bool, NodeKind::Bool(_))
            | (VarType::List, NodeKind::Array(_))
            | (VarType::Table, NodeKind::Table(_))
    )
}

/// "a string", "an integer", … for a variable type.
pub fn var_type_phrase(ty: VarType) -> &'static str {
    match ty {
        VarType::String => "a string",
        VarType::Integer => "an integer",
        VarType::Number => "a number",
        VarType::Bool => "a boolean",
        VarType::List => "a list",
        VarType::Table => "a table",
        VarType::Any => "any value",
    }
}
