//! Fuzz the workflow language: any text through parsing, checking, variable
//! resolution, interpolation and diagnostic rendering must never panic.
#![no_main]

use std::path::Path;

use flow_engine::diag::Source;
use flow_engine::lang::check::check_workflow;
use flow_engine::lang::parse::parse_workflow;
use flow_engine::lang::resolve::{Lookup, evaluate};
use flow_engine::lang::vars::{VarInputs, resolve_vars};
use flow_providers::Registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = Source::new("fuzz.toml", text);
    let registry = Registry::builtin();
    let (wf, mut diags) = parse_workflow(&source, Path::new("."));
    if let Some(wf) = wf {
        let (_, check) = check_workflow(&wf, &registry);
        diags.extend(check);
        let (vars, var_diags) = resolve_vars(&wf, &VarInputs::default(), &|_| None);
        diags.extend(var_diags);
        for step in &wf.steps {
            for input in &step.inputs {
                let _ = evaluate(&input.value, &vars, &|_, _| Lookup::Unknown);
            }
        }
    }
    let _ = diags.render(false, 80);
});
