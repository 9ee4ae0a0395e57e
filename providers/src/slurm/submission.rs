//! What a `slurm.job`'s inputs give `sbatch` and its messages: the
//! options, the output matchers and the job's label. Shared by the job's
//! single submission (`job.rs`) and its resubmissions (`restart.rs`).

use super::control;
use crate::capture::Matchers;
use crate::contract::{OpContext, ProviderError, Values};
use crate::inputs;

/// The step's `success_pattern` and `capture`.
pub(super) fn matchers(values: &Values) -> Result<Matchers, ProviderError> {
    Matchers::from_values(values).map_err(|p| ProviderError::bad_input(p.message))
}

/// sbatch's options from the inputs, the token's comment first.
pub(super) fn sbatch_args(values: &Values, token: &str) -> Result<Vec<String>, ProviderError> {
    let mut args = Vec::new();
    if !token.is_empty() {
        args.push(format!("--comment={}", control::token_comment(token)));
    }
    for (input, flag) in [
        ("job_name", "--job-name"),
        ("array", "--array"),
        ("partition", "--partition"),
        ("time_limit", "--time"),
        ("chdir", "--chdir"),
        ("output", "--output"),
    ] {
        if let Some(v) = inputs::opt_str(values, input)?.filter(|v| !v.is_empty()) {
            args.push(format!("{flag}={v}"));
        }
    }
    if let Some(n) = inputs::opt_int(values, "nodes")? {
        args.push(format!("--nodes={n}"));
    }
    args.extend(inputs::str_list(values, "sbatch_args")?);
    Ok(args)
}

/// A short name for the job in messages.
pub(super) fn job_label(ctx: &OpContext, values: &Values) -> String {
    inputs::opt_str(values, "job_name")
        .ok()
        .flatten()
        .unwrap_or_else(|| ctx.step.clone())
}
