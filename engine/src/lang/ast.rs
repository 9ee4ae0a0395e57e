//! The parsed workflow: every name and value keeps the span it came from.

use std::time::Duration;

use crate::diag::{Source, Span};

/// A value as written in the workflow, before interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where it is written.
    pub span: Span,
    /// What it is.
    pub kind: NodeKind,
}

/// The kinds of value a workflow can write.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A string, possibly with `${...}` references.
    Str(Template),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A TOML date-time, kept as written.
    Datetime(String),
    /// An array.
    Array(Vec<Node>),
    /// A table, keys in source order.
    Table(Vec<Entry>),
}

/// A key and its value inside a table.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Where the key is written.
    pub key_span: Span,
    /// The value.
    pub value: Node,
}

/// A string split into literal text and references.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    /// The pieces, in order.
    pub parts: Vec<Part>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Literal text (`$${` already turned into `${`).
    Lit(String),
    /// A `${...}` expression.
    Expr(Expr),
}

pub use super::expr::ast::{EachField, Expr, RefTarget, Reference, base_name, instance_name};

impl Template {
    /// A template of plain text.
    pub fn literal(text: &str) -> Self {
        Template {
            parts: vec![Part::Lit(text.to_string())],
        }
    }

    /// The single expression, when the template is exactly one `${...}`:
    /// its value keeps its type (a list stays a list).
    pub fn single_expr(&self) -> Option<&Expr> {
        match self.parts.as_slice() {
            [Part::Expr(e)] => Some(e),
            _ => None,
        }
    }

    /// The single reference, when the template is exactly one `${...}` that
    /// is a plain reference.
    pub fn single_ref(&self) -> Option<&Reference> {
        self.single_expr().and_then(Expr::as_ref)
    }

    /// The references it contains, inside expressions too.
    pub fn refs(&self) -> impl Iterator<Item = &Reference> {
        let mut out = Vec::new();
        for p in &self.parts {
            if let Part::Expr(e) = p {
                e.refs(&mut out);
            }
        }
        out.into_iter()
    }

    /// The expressions it contains.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.parts.iter().filter_map(|p| match p {
            Part::Expr(e) => Some(e),
            Part::Lit(_) => None,
        })
    }

    /// The text, when it has no references.
    pub fn as_literal(&self) -> Option<String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Expr(_) => return None,
            }
        }
        Some(out)
    }
}

impl Node {
    /// Every reference inside this value, depth first.
    pub fn refs(&self) -> Vec<&Reference> {
        let mut out = Vec::new();
        self.collect_refs(&mut out);
        out
    }

    fn collect_refs<'a>(&'a self, out: &mut Vec<&'a Reference>) {
        match &self.kind {
            NodeKind::Str(t) => out.extend(t.refs()),
            NodeKind::Array(items) => items.iter().for_each(|n| n.collect_refs(out)),
            NodeKind::Table(entries) => entries.iter().for_each(|e| e.value.collect_refs(out)),
            _ => {}
        }
    }

    /// Every `${…}` expression inside this value, depth first.
    pub fn exprs(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        self.collect_exprs(&mut out);
        out
    }

    fn collect_exprs<'a>(&'a self, out: &mut Vec<&'a Expr>) {
        match &self.kind {
            NodeKind::Str(t) => out.extend(t.exprs()),
            NodeKind::Array(items) => items.iter().for_each(|n| n.collect_exprs(out)),
            NodeKind::Table(entries) => entries.iter().for_each(|e| e.value.collect_exprs(out)),
            _ => {}
        }
    }

    /// Call `f` on every reference inside this value.
    pub fn visit_refs_mut(&mut self, f: &mut dyn FnMut(&mut Reference)) {
        match &mut self.kind {
            NodeKind::Str(t) => {
                for part in &mut t.parts {
                    if let Part::Expr(e) = part {
                        e.visit_refs_mut(f);
                    }
                }
            }
            NodeKind::Array(items) => items.iter_mut().for_each(|n| n.visit_refs_mut(f)),
            NodeKind::Table(entries) => entries.iter_mut().for_each(|e| e.value.visit_refs_mut(f)),
            _ => {}
        }
    }

    /// The plain string, when this is a string without references.
    pub fn as_plain_str(&self) -> Option<String> {
        match &self.kind {
            NodeKind::Str(t) => t.as_literal(),
            _ => None,
        }
    }
}

/// The declared type of a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarType {
    /// A string (the default).
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// true or false.
    Bool,
    /// A list.
    List,
    /// A table.
    Table,
    /// Anything.
    Any,
}

impl VarType {
    /// Parse a `type = "..."` value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "string" => VarType::String,
            "integer" | "int" => VarType::Integer,
            "number" => VarType::Number,
            "bool" | "boolean" => VarType::Bool,
            "list" => VarType::List,
            "table" | "map" => VarType::Table,
            "any" => VarType::Any,
            _ => return None,
        })
    }

    /// The name as written.
    pub fn name(self) -> &'static str {
        match self {
            VarType::String => "string",
            VarType::Integer => "integer",
            VarType::Number => "number",
            VarType::Bool => "bool",
            VarType::List => "list",
            VarType::Table => "table",
            VarType::Any => "any",
        }
    }
}

/// A `[vars.NAME]` declaration.
#[derive(Debug, Clone)]
pub struct VarDecl {
    /// The variable's name.
    pub name: String,
    /// Where the name is written.
    pub name_span: Span,
    /// Its default value.
    pub default: Option<Node>,
    /// What it is for.
    pub description: Option<String>,
    /// Its type (`string` when not given).
    pub ty: VarType,
    /// Whether it is secret.
    pub sensitive: bool,
    /// The environment variable it is read from.
    pub env: Option<String>,
    /// Whether its declaration had problems (already reported): later checks
    /// skip it rather than report knock-on errors.
    pub broken: bool,
}

/// A `[steps.NAME]` declaration.
#[derive(Debug, Clone)]
pub struct StepDecl {
    /// The step's name.
    pub name: String,
    /// Where the name is written.
    pub name_span: Span,
    /// The provider kind.
    pub provider: String,
    /// Where the provider is written (or the name when missing).
    pub provider_span: Span,
    /// Explicit dependencies, with their spans.
    pub depends_on: Vec<(String, Span)>,
    /// How long one attempt may take.
    pub timeout: Option<Duration>,
    /// How many times a retryable error is retried.
    pub retries: u32,
    /// Whether destroy must refuse it.
    pub prevent_destroy: bool,
    /// `lifecycle.create_before_destroy` as written, and where: whether a
    /// replacement is made before the old object is deleted (`None`: as
    /// the provider does by default).
    pub create_before_destroy: Option<(bool, Span)>,
    /// A region for this step only (written plainly, or resolved from
    /// `region_node` once the variables are known).
    pub region: Option<String>,
    /// The written `region` when it uses variables (`"${vars.region}"`).
    pub region_node: Option<Node>,
    /// The ID of an existing object the step adopts instead of creating it
    /// (`import = "…"`), once resolved.
    pub import: Option<String>,
    /// The written `import` when it uses variables.
    pub import_node: Option<Node>,
    /// Where `import` is written.
    pub import_span: Option<Span>,
    /// The provider's inputs, in source order.
    pub inputs: Vec<Entry>,
    /// Where `[steps.NAME.inputs]` (or the step) is written, for missing inputs.
    pub inputs_span: Span,
    /// Whether its declaration had problems (already reported): later checks
    /// skip what they would only report as knock-on errors.
    pub broken: bool,
    /// `for_each = …`: one instance of the step per item or key (expanded by
    /// `lang::expand` once the variables are known).
    pub for_each: Option<Node>,
    /// For an instance made by `for_each`: the step it was written as, its
    /// key and value (`each.key`, `each.value`).
    pub instance: Option<Instance>,
    /// For a step of a module: the module call it belongs to (its inputs,
    /// its folder). `None` for the workflow's own steps.
    pub module: Option<std::sync::Arc<ModuleFrame>>,
    /// For a step of a module: the module file it is written in (problems
    /// point there). `None` for the workflow's own steps.
    pub source: Option<Source>,
    /// The provider kind `provider` names, once resolved
    /// (`lang::providers::resolve_providers`); `None` before that, or when
    /// the name is unknown (reported there).
    pub kind: Option<ProviderKind>,
}

/// One instance of a step with `for_each`.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The step's name as written (`nccl` for `nccl["8"]`).
    pub base: String,
    /// `each.key`.
    pub key: String,
    /// `each.value`.
    pub value: serde_json::Value,
}

/// `--target` and `--replace` names as addresses: a name that is not an
/// address in `known` but is the step of some (`nccl` for `nccl["2"]` and
/// `nccl["8"]`) or a module call (`cluster` for `cluster.vpc` and
/// `cluster.nccl`) stands for all of them; anything else stays as given.
pub fn select_addresses<'k>(
    names: &[String],
    known: impl Iterator<Item = &'k str> + Clone,
) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        if known.clone().any(|k| k == name) {
            out.push(name.clone());
            continue;
        }
        let instances: Vec<String> = known
            .clone()
            .filter(|k| {
                *k != name
                    && (base_name(k) == name
                        || k.strip_prefix(name.as_str())
                            .is_some_and(|rest| rest.starts_with('.')))
            })
            .map(str::to_string)
            .collect();
        if instances.is_empty() {
            out.push(name.clone());
        } else {
            out.extend(instances);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A `[modules.NAME]` call: a folder of steps used with these inputs.
#[derive(Debug, Clone)]
pub struct ModuleCall {
    /// The call's name (`p4d`): its steps become `p4d.STEP`.
    pub name: String,
    /// Where the name is written.
    pub name_span: Span,
    /// `source`: the module's folder, relative to the calling file's.
    pub source: String,
    /// Where `source` is written.
    pub source_span: Span,
    /// `inputs = { … }`: a value for each of the module's inputs.
    pub inputs: Vec<Entry>,
    /// Where the inputs (or the call) are written.
    pub inputs_span: Span,
}

/// A module call once expanded: what its steps' `inputs.NAME` read.
#[derive(Debug)]
pub struct ModuleFrame {
    /// The call's address: `p4d`, or `outer.inner` for a module a module
    /// calls.
    pub address: String,
    /// The file the call is written in.
    pub call_source: Source,
    /// Where the call's name is written there.
    pub call_span: Span,
    /// The values the call gives, written in `call_source`.
    pub inputs: Vec<Entry>,
    /// The module's `[inputs.NAME]` declarations (types, defaults, secrets).
    pub decls: Vec<VarDecl>,
    /// The module's folder: the `source` of the calls it makes resolve
    /// against it.
    pub dir: std::path::PathBuf,
    /// The module that makes this call, if a module does.
    pub parent: Option<std::sync::Arc<ModuleFrame>>,
}

/// A module's `[outputs]`, by call address.
#[derive(Debug, Clone)]
pub struct ModuleOutputs {
    /// The call.
    pub frame: std::sync::Arc<ModuleFrame>,
    /// Each output and its value, with the module file it is written in (a
    /// module may spread its outputs over several files).
    pub entries: Vec<(Entry, Source)>,
}

impl ModuleOutputs {
    /// The output called `key`, and the file it is written in.
    pub fn get(&self, key: &str) -> Option<(&Entry, &Source)> {
        self.entries
            .iter()
            .find(|(e, _)| e.key == key)
            .map(|(e, s)| (e, s))
    }

    /// The outputs' names, in the order written.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(e, _)| e.key.as_str())
    }
}

/// A `[[moved]]` entry: state recorded under `from` now belongs to `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    /// The old address.
    pub from: String,
    /// The new address.
    pub to: String,
    /// Where the entry is written.
    pub span: Span,
}

/// A step's provider kind, resolved from its name.
#[derive(Clone)]
pub struct ProviderKind(pub std::sync::Arc<dyn flow_providers::Provider>);

impl std::fmt::Debug for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

/// A whole workflow file.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The file.
    pub source: Source,
    /// The folder it lives in: relative paths resolve against it, and stay
    /// inside it or the folders `[workflow] allow_paths` opens.
    pub dir: flow_providers::Workdir,
    /// `[workflow] name` (the file stem when missing).
    pub name: String,
    /// `[workflow] description`.
    pub description: Option<String>,
    /// `[workflow] region` (written plainly, or resolved from `region_node`
    /// once the variables are known; an empty value leaves the region to the
    /// AWS SDK's chain).
    pub region: Option<String>,
    /// The written `[workflow] region` when it uses variables.
    pub region_node: Option<Node>,
    /// `[workflow] profile`.
    pub profile: Option<String>,
    /// `[workflow.state]`: where the state is kept (local when absent).
    pub state: Option<StateSettings>,
    /// Variables, in source order.
    pub vars: Vec<VarDecl>,
    /// Steps, in source order (instances in place of a step with
    /// `for_each`, once expanded).
    pub steps: Vec<StepDecl>,
    /// `[[moved]]` entries, in source order.
    pub moved: Vec<Moved>,
    /// `[modules.NAME]` calls, in source order (expanded into `steps` by
    /// `lang::modules`).
    pub modules: Vec<ModuleCall>,
    /// `[outputs]`: in a module's file, what the module gives its caller.
    pub outputs: Vec<Entry>,
    /// The outputs of every module call, by the call's address.
    pub module_outputs: std::collections::BTreeMap<String, ModuleOutputs>,
    /// Position of each step in `steps`, by name (see [`Workflow::index_steps`]).
    pub step_index: rustc_hash::FxHashMap<String, usize>,
    /// Steps whose `for_each` reads outputs known only after apply, by
    /// name: they stay in `steps` unexpanded until those outputs exist.
    pub deferred: std::collections::BTreeMap<String, Deferral>,
}

/// Why a step with `for_each` waits: the steps whose outputs its keys come
/// from, which must apply first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    /// The steps whose outputs the `for_each` reads.
    pub waits_on: Vec<String>,
}

impl Workflow {
    /// Rebuild the name index after `steps` changed.
    pub fn index_steps(&mut self) {
        self.step_index = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
    }

    /// Whether `name` is a step whose `for_each` waits for apply.
    pub fn is_deferred(&self, name: &str) -> bool {
        self.deferred.contains_key(name)
    }

    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&StepDecl> {
        self.step_position(name).map(|i| &self.steps[i])
    }

    /// Where the step called `name` is in `steps`.
    pub fn step_position(&self, name: &str) -> Option<usize> {
        self.step_index.get(name).copied()
    }

    /// The variable called `name`.
    pub fn var(&self, name: &str) -> Option<&VarDecl> {
        self.vars.iter().find(|v| v.name == name)
    }

    /// Every module call once, the calls that modules make included: those
    /// of the steps and those of the module outputs, with their parents.
    pub fn call_frames(&self) -> Vec<&ModuleFrame> {
        let mut frames: Vec<&ModuleFrame> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let calls = self
            .steps
            .iter()
            .filter_map(|s| s.module.as_deref())
            .chain(self.module_outputs.values().map(|o| &*o.frame));
        for frame in calls {
            let mut next = Some(frame);
            while let Some(f) = next {
                if seen.insert(f.address.as_str()) {
                    frames.push(f);
                }
                next = f.parent.as_deref();
            }
        }
        frames
    }

    /// The file `step` is written in: a module's, or the workflow's.
    pub fn source_of<'s>(&'s self, step: &'s StepDecl) -> &'s Source {
        step.source.as_ref().unwrap_or(&self.source)
    }

    /// The folder `step`'s relative paths (templates, manifests, `file()`)
    /// resolve against: the workflow's, for a module's steps too, as in
    /// Terraform; so one module serves workflows that keep their files
    /// beside them, and takes paths as inputs. (Only a module call's
    /// `source` is relative to the file that makes the call.)
    pub fn dir_of<'s>(&'s self, _step: &'s StepDecl) -> &'s flow_providers::Workdir {
        &self.dir
    }
}

/// Where the state is kept, as the workflow says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSettings {
    /// `.flow/NAME` beside the workflow (the default).
    Local {
        /// How backups are kept (`keep_backups`, `keep_backups_for`).
        backups: flow_state::Retention,
    },
    /// One S3 object, its local copy in `.flow/NAME`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
        /// The bucket's region.
        region: Option<String>,
        /// The AWS profile.
        profile: Option<String>,
        /// How long the lock lasts without renewal.
        lease: Option<std::time::Duration>,
        /// How backups are kept (`keep_backups`, `keep_backups_for`).
        backups: flow_state::Retention,
    },
}

impl StateSettings {
    /// How backups are kept, either way.
    pub fn backups(&self) -> flow_state::Retention {
        match self {
            StateSettings::Local { backups } | StateSettings::S3 { backups, .. } => *backups,
        }
    }
}
