//! Expand `[modules.NAME]` calls: each module's steps join the workflow as
//! `NAME.STEP`, their references to each other renamed, `inputs.X` read
//! from the call (see `resolve::Context`), and the module's `[outputs]`
//! kept for `modules.NAME.outputs.KEY`. Problems inside a module point into
//! its file; problems with the call point at the call.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ast::{
    Entry, ModuleCall, ModuleFrame, ModuleOutputs, Node, RefTarget, StepDecl, VarDecl, Workflow,
    base_name,
};
use super::parse::parse_module_file;
use crate::diag::{Diag, Diagnostics, Source, Span};
use flow_providers::suggest::closest;

/// Expand every module call of `wf` (and the calls modules make) into its
/// steps and outputs. Returns every problem found.
pub fn expand_modules(wf: &mut Workflow) -> Diagnostics {
    let mut diags = Diagnostics::default();
    if wf.modules.is_empty() {
        return diags;
    }
    let mut out = Expanded::default();
    let root = wf
        .dir
        .canonicalize()
        .unwrap_or_else(|_| wf.dir.to_path_buf());
    let calls = wf.modules.clone();
    let source = wf.source.clone();
    for call in &calls {
        expand_call(
            call,
            &source,
            &wf.dir,
            None,
            "",
            &mut vec![(root.join(&source.name), "the workflow".into())],
            &mut out,
            &mut diags,
        );
    }
    wf.steps.extend(out.steps);
    wf.module_outputs = out.outputs;
    wf.index_steps();
    diags
}

#[derive(Default)]
struct Expanded {
    steps: Vec<StepDecl>,
    outputs: BTreeMap<String, ModuleOutputs>,
}

/// One module's files, merged.
struct Module {
    decls: Vec<VarDecl>,
    steps: Vec<StepDecl>,
    outputs: Vec<(Entry, Source)>,
    calls: Vec<(ModuleCall, Source)>,
}

#[allow(clippy::too_many_arguments)]
fn expand_call(
    call: &ModuleCall,
    call_source: &Source,
    call_dir: &Path,
    parent: Option<Arc<ModuleFrame>>,
    prefix: &str,
    stack: &mut Vec<(PathBuf, String)>,
    out: &mut Expanded,
    diags: &mut Diagnostics,
) {
    let at_call = |code: &'static str, msg: String, span: Span, label: &str| {
        Diag::new(code, msg)
            .in_source(call_source)
            .label(span, label)
    };
    let dir = call_dir.join(&call.source);
    if !dir.is_dir() {
        diags.push(
            at_call(
                "flow::module-source",
                format!("module `{}`: the folder `{}` does not exist (looked for {})", call.name, call.source, dir.display()),
                call.source_span.clone(),
                "no such folder",
            )
            .help("`source` is a folder of .toml files, relative to the folder of the file that calls it"),
        );
        return;
    }
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    let address = format!("{prefix}{}", call.name);
    if let Some(at) = stack.iter().position(|(p, _)| *p == canonical) {
        let chain: Vec<&str> = stack[at..].iter().map(|(_, name)| name.as_str()).collect();
        let d = at_call(
            "flow::module-cycle",
            format!(
                "module `{}` calls itself: {} → {}",
                call.name,
                chain.join(" → "),
                call.source
            ),
            call.source_span.clone(),
            "a module already being expanded",
        )
        .help("a module cannot call itself, directly or through other modules");
        diags.push(match &parent {
            Some(frame) => called_here(d, frame),
            None => d,
        });
        return;
    }
    let Some(module) = read_module(&dir, &call.source, diags) else {
        return;
    };
    check_call_inputs(call, call_source, &module.decls, diags);
    let frame = Arc::new(ModuleFrame {
        address: address.clone(),
        call_source: call_source.clone(),
        call_span: call.name_span.clone(),
        inputs: call.inputs.clone(),
        decls: module.decls.clone(),
        dir: dir.clone(),
        parent,
    });
    let local: BTreeSet<String> = module.steps.iter().map(|s| s.name.clone()).collect();
    let nested: BTreeSet<String> = module.calls.iter().map(|(c, _)| c.name.clone()).collect();
    let names = Names {
        address: &address,
        frame: &frame,
        local: &local,
        nested: &nested,
        decls: &module.decls,
    };
    for mut step in module.steps {
        let source = step.source.clone().expect("module steps know their file");
        for input in &mut step.inputs {
            names.rewrite(&mut input.value, &source, diags);
        }
        for node in [
            &mut step.for_each,
            &mut step.region_node,
            &mut step.import_node,
        ]
        .into_iter()
        .flatten()
        {
            names.rewrite(node, &source, diags);
        }
        for (dep, span) in &mut step.depends_on {
            if local.contains(base_name(dep)) {
                *dep = format!("{address}.{dep}");
            } else {
                diags.push(called_here(
                    unknown_step(&source, dep, span.clone(), &local),
                    &frame,
                ));
            }
        }
        step.name = format!("{address}.{}", step.name);
        step.module = Some(frame.clone());
        out.steps.push(step);
    }
    let mut entries = Vec::new();
    for (mut entry, source) in module.outputs {
        names.rewrite(&mut entry.value, &source, diags);
        entries.push((entry, source));
    }
    out.outputs.insert(
        address.clone(),
        ModuleOutputs {
            frame: frame.clone(),
            entries,
        },
    );
    stack.push((canonical, call.source.clone()));
    for (inner, source) in &module.calls {
        // What the call passes is written in this module: its names are
        // this module's steps and calls.
        let mut inner = inner.clone();
        for input in &mut inner.inputs {
            names.rewrite(&mut input.value, source, diags);
        }
        expand_call(
            &inner,
            source,
            &dir,
            Some(frame.clone()),
            &format!("{address}."),
            stack,
            out,
            diags,
        );
    }
    stack.pop();
}

/// Read and parse every `.toml` file of a module's folder.
fn read_module(dir: &Path, written: &str, diags: &mut Diagnostics) -> Option<Module> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    if files.is_empty() {
        diags.push(
            Diag::new(
                "flow::module-source",
                format!("the module folder `{written}` has no .toml files"),
            )
            .help("a module is a folder of .toml files with [inputs], [steps] and [outputs]"),
        );
        return None;
    }
    let mut module = Module {
        decls: Vec::new(),
        steps: Vec::new(),
        outputs: Vec::new(),
        calls: Vec::new(),
    };
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                diags.push(Diag::new(
                    "flow::missing-file",
                    format!("cannot read {}: {e}", file.display()),
                ));
                continue;
            }
        };
        let source = Source::new(file.display().to_string(), text);
        let (parsed, file_diags) = parse_module_file(&source, dir);
        diags.extend(file_diags);
        let Some(parsed) = parsed else { continue };
        for step in parsed.steps {
            if module.steps.iter().any(|s| s.name == step.name) {
                diags.push(
                    Diag::new(
                        "flow::duplicate-name",
                        format!("the module `{written}` declares step `{}` twice", step.name),
                    )
                    .in_source(&source)
                    .label(step.name_span.clone(), "declared again here"),
                );
                continue;
            }
            module.steps.push(StepDecl {
                source: Some(source.clone()),
                ..step
            });
        }
        module.decls.extend(parsed.vars);
        module
            .outputs
            .extend(parsed.outputs.into_iter().map(|e| (e, source.clone())));
        module
            .calls
            .extend(parsed.modules.into_iter().map(|c| (c, source.clone())));
    }
    Some(module)
}

/// The call's inputs against the module's declarations: none unknown, none
/// missing that has no default.
fn check_call_inputs(
    call: &ModuleCall,
    source: &Source,
    decls: &[VarDecl],
    diags: &mut Diagnostics,
) {
    let declared: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
    for given in &call.inputs {
        if declared.contains(&given.key.as_str()) {
            continue;
        }
        let help = match closest(&given.key, declared.iter().copied()) {
            Some(s) => format!(
                "did you mean `{s}`? The module's inputs are: {}",
                declared.join(", ")
            ),
            None if declared.is_empty() => "the module declares no inputs".into(),
            None => format!("the module's inputs are: {}", declared.join(", ")),
        };
        diags.push(
            Diag::new(
                "flow::module-input",
                format!("module `{}` has no input `{}`", call.name, given.key),
            )
            .in_source(source)
            .label(given.key_span.clone(), "unknown input")
            .help(help),
        );
    }
    for decl in decls.iter().filter(|d| d.default.is_none()) {
        if call.inputs.iter().any(|e| e.key == decl.name) {
            continue;
        }
        let what = decl
            .description
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        diags.push(
            Diag::new(
                "flow::module-input",
                format!("module `{}` needs the input `{}`", call.name, decl.name),
            )
            .in_source(source)
            .label(call.inputs_span.clone(), "given here")
            .help(format!(
                "add `{} = …`{what} to the call's inputs",
                decl.name
            )),
        );
    }
}

fn unknown_step(source: &Source, name: &str, span: Span, local: &BTreeSet<String>) -> Diag {
    let d = Diag::new(
        "flow::unknown-step",
        format!("the module has no step `{}`", base_name(name)),
    )
    .in_source(source)
    .label(span, "not a step of this module");
    match closest(base_name(name), local.iter().map(String::as_str)) {
        Some(s) => d.help(format!(
            "did you mean `{s}`? A module's steps see only the module's own steps"
        )),
        None => d.help(
            "a module's steps see only the module's own steps; pass other values in as inputs",
        ),
    }
}

/// `d`, a problem inside a module, also pointing at the module's call.
pub fn called_here(d: Diag, frame: &ModuleFrame) -> Diag {
    d.also_at(
        &frame.call_source,
        frame.call_span.clone(),
        format!("in module `{}`, called here", frame.address),
    )
}

/// How names inside one module are read and renamed.
struct Names<'a> {
    address: &'a str,
    frame: &'a ModuleFrame,
    local: &'a BTreeSet<String>,
    nested: &'a BTreeSet<String>,
    decls: &'a [VarDecl],
}

impl Names<'_> {
    /// Rename the module's steps and calls in `node` to their addresses,
    /// reporting references a module cannot make.
    fn rewrite(&self, node: &mut Node, source: &Source, diags: &mut Diagnostics) {
        let mut found = Diagnostics::default();
        self.rewrite_refs(node, source, &mut found);
        for d in found.items {
            diags.push(called_here(d, self.frame));
        }
    }

    fn rewrite_refs(&self, node: &mut Node, source: &Source, diags: &mut Diagnostics) {
        node.visit_refs_mut(&mut |r| match &mut r.target {
            RefTarget::Output { step, .. } => {
                if self.local.contains(base_name(step)) {
                    *step = format!("{}.{step}", self.address);
                } else {
                    diags.push(unknown_step(source, step, r.span.clone(), self.local));
                }
            }
            RefTarget::ModuleOutput { module, .. } => {
                if self.nested.contains(module.as_str()) {
                    *module = format!("{}.{module}", self.address);
                } else {
                    diags.push(
                        Diag::new("flow::unknown-module", format!("this module calls no module `{module}`"))
                            .in_source(source)
                            .label(r.span.clone(), "no such call")
                            .help("call it with [modules.NAME] in the module's files"),
                    );
                }
            }
            RefTarget::Var(name) => diags.push(
                Diag::new("flow::module-var", format!("a module cannot read `vars.{name}`"))
                    .in_source(source)
                    .label(r.span.clone(), "a workflow variable")
                    .help(format!("declare [inputs.{name}] in the module, pass it in the call, and read `inputs.{name}`")),
            ),
            RefTarget::Input(name) => {
                if !self.decls.iter().any(|d| d.name == *name) {
                    let declared = self.decls.iter().map(|d| d.name.as_str());
                    let help = match closest(name, declared) {
                        Some(s) => format!("did you mean `inputs.{s}`?"),
                        None => format!("declare it with [inputs.{name}]"),
                    };
                    diags.push(
                        Diag::new("flow::unknown-input", format!("the module declares no input `{name}`"))
                            .in_source(source)
                            .label(r.span.clone(), "not declared")
                            .help(help),
                    );
                }
            }
            RefTarget::Each(_) | RefTarget::Local(_) => {}
        });
    }
}

/// Every step output that `refs` read, through module inputs (to what the
/// call passes) and module outputs (to what the module's outputs read):
/// the steps a step that makes these references depends on.
pub fn outputs_read<'w>(
    wf: &'w Workflow,
    frame: Option<&'w ModuleFrame>,
    refs: Vec<&'w super::ast::Reference>,
    out: &mut Vec<(&'w str, Span)>,
    depth: usize,
) {
    // Inputs and outputs may refer to each other through several calls;
    // a loop between them is refused when they are evaluated.
    if depth > 16 {
        return;
    }
    for r in refs {
        match &r.target {
            RefTarget::Output { step, .. } => out.push((step.as_str(), r.span.clone())),
            RefTarget::Input(name) => {
                let Some(frame) = frame else { continue };
                if let Some(entry) = frame.inputs.iter().find(|e| e.key == *name) {
                    outputs_read(
                        wf,
                        frame.parent.as_deref(),
                        entry.value.refs(),
                        out,
                        depth + 1,
                    );
                }
            }
            RefTarget::ModuleOutput { module, key } => {
                let Some(outputs) = wf.module_outputs.get(module) else {
                    continue;
                };
                if let Some((entry, _)) = outputs.get(key) {
                    outputs_read(wf, Some(&outputs.frame), entry.value.refs(), out, depth + 1);
                }
            }
            _ => {}
        }
    }
}
