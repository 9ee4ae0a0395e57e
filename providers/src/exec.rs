//! The `exec` provider: a resource made by shell commands.
//!
//! `run` creates or updates it and reports outputs by appending `key=value`
//! lines to the file named by `$FLOW_OUTPUT`; `destroy`, if given, deletes
//! it. Both run with `sh` in the workflow file's folder (or `workdir`), the
//! script read from a sealed in-memory file and never from the command line
//! (the `script` module). The environment is not flow's: only the variables
//! in [`DEFAULT_PASS`] and the step's `pass_env` pass (the `environment`
//! module), then the step's `env` and:
//!
//! - `FLOW_STEP`: the step's name;
//! - `FLOW_OPERATION_TOKEN`: the operation's token, the same when flow
//!   re-issues an interrupted command on resume, so a script can use it to
//!   be idempotent;
//! - `FLOW_OUTPUT`: a fresh empty file for outputs, removed afterwards
//!   (`destroy` gets one too, but what it writes there is ignored);
//! - for `destroy` only, each output as `FLOW_OUTPUT_<KEY>` (`vpc.id` →
//!   `FLOW_OUTPUT_VPC_ID`).
//!
//! Output lines go to the step log and, at most four times a second, to the
//! live progress display. A command still running when its operation is
//! abandoned (timeout, Ctrl-C) is killed with its whole process group; see
//! the `group` module for what survives a `kill -9` of flow itself.

mod checks;
mod environment;
mod group;
mod inputs;
mod outputs;
mod script;
mod shell;
mod transcript;

use async_trait::async_trait;
use serde_json::Value;

use crate::contract::{
    Applied, InputSpec, InputType, InputValue, OpContext, Prior, Problem, Provider, ProviderError,
    ReadOutcome, Schema, StepKind, ValidateContext, Values, is_sealed,
};
pub use environment::DEFAULT_PASS;
use inputs::ExecInputs;
use shell::Shell;

/// The `exec` provider kind.
#[derive(Debug, Clone)]
pub struct Exec {
    /// What [`Provider::schema`] returns.
    schema: Schema,
}

impl Exec {
    /// The provider with its schema.
    pub fn new() -> Self {
        Exec {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A resource created by a shell command and deleted by another",
                inputs: vec![
                    InputSpec::required(
                        "run",
                        InputType::String,
                        "Shell command that creates or updates; appends `key=value` lines to $FLOW_OUTPUT for outputs",
                    ),
                    InputSpec::optional(
                        "destroy",
                        InputType::String,
                        "Shell command that deletes; sees the outputs as $FLOW_OUTPUT_<KEY>",
                    ),
                    InputSpec::optional(
                        "env",
                        InputType::Map(Box::new(InputType::String)),
                        "Environment variables set for both commands",
                    ),
                    InputSpec::optional(
                        "pass_env",
                        InputType::List(Box::new(InputType::String)),
                        "Variables of flow's environment the commands get besides PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TERM, TZ and TMPDIR: names, or prefixes ending in `*` (\"AWS_*\")",
                    ),
                    InputSpec::optional(
                        "workdir",
                        InputType::String,
                        "Folder to run in, relative to the workflow file's folder",
                    ),
                    InputSpec::optional(
                        "expect",
                        InputType::Map(Box::new(InputType::String)),
                        "Gates on the outputs `run` writes and `parse` reads: name = \">= 300\", \"between 0.75 0.85\"; one that fails, or an output not written, fails the step",
                    ),
                    InputSpec::optional(
                        "parse",
                        InputType::String,
                        "The program whose output `run` prints (nccl-tests, torchrun, …): what it reads from the output (busbw, sizes, …) joins the outputs, as for a job's log",
                    ),
                ],
                open_inputs: false,
            },
        }
    }

    /// Runs the script of input `label` with the step's environment plus
    /// `extra_env`, and returns what it wrote to `$FLOW_OUTPUT` and, with
    /// `keep`, everything it printed (else nothing).
    async fn run_script(
        &self,
        ctx: &OpContext,
        inputs: &ExecInputs,
        label: &'static str,
        script: &str,
        extra_env: Vec<(String, String)>,
        keep: bool,
    ) -> Result<(Values, String), ProviderError> {
        let output_file = tempfile::Builder::new()
            .prefix("flow-output-")
            .tempfile()
            .map_err(|e| {
                ProviderError::fatal(format!("could not create the $FLOW_OUTPUT file: {e}"))
            })?;
        let mut env = inputs.env.clone();
        env.extend(extra_env);
        env.push(("FLOW_STEP".into(), ctx.step.clone()));
        env.push(("FLOW_OPERATION_TOKEN".into(), ctx.token.clone()));
        env.push((
            "FLOW_OUTPUT".into(),
            output_file.path().to_string_lossy().into_owned(),
        ));
        let dir = inputs.dir(&ctx.workdir);
        let printed = Shell {
            label,
            script,
            dir: &dir,
            pass_env: &inputs.pass_env,
            env,
            keep,
        }
        .run(ctx.reporter.as_ref())
        .await?;
        let bytes = tokio::fs::read(output_file.path()).await.map_err(|e| {
            ProviderError::fatal(format!("could not read the $FLOW_OUTPUT file: {e}"))
        })?;
        Ok((
            outputs::parse(label, &String::from_utf8_lossy(&bytes))?,
            printed,
        ))
    }

    /// Runs `run` and makes its outputs the step's, once `expect`'s gates
    /// passed them.
    async fn apply(&self, ctx: &OpContext, values: &Values) -> Result<Applied, ProviderError> {
        let inputs = ExecInputs::from_values(values)?;
        let gates = crate::capture::Matchers::on_outputs(&inputs.expect)
            .map_err(|p| ProviderError::bad_input(p.message))?;
        let reader = match &inputs.parse {
            Some(program) => Some(
                crate::capture::Matchers::default()
                    .reading(Some(program))
                    .map_err(|p| ProviderError::bad_input(p.message).at_input(p.path))?,
            ),
            None => None,
        };
        let (mut outputs, printed) = self
            .run_script(
                ctx,
                &inputs,
                "run",
                &inputs.run,
                Vec::new(),
                reader.is_some(),
            )
            .await?;
        // What `parse` reads from the output joins what the script wrote
        // (which wins where both name a key).
        let read = match &reader {
            Some(reader) => reader
                .judge(&printed, ctx.reporter.as_ref())
                .map_err(|e| {
                    ProviderError::fatal(e.to_string()).at_input(["parse"]).with_help(
                        "the script ran, but its output is not what `parse` reads: its output is in `flow logs FILE STEP`",
                    )
                })?,
            None => Values::new(),
        };
        // The lines `parse` read its values from, but for those the script
        // wrote itself.
        let mut lines = match &reader {
            Some(reader) => reader.lines_of(&printed),
            None => Default::default(),
        };
        lines.retain(|k, _| !outputs.contains_key(k));
        for (k, v) in &read {
            outputs.entry(k.clone()).or_insert_with(|| v.clone());
        }
        gates
            .judge_outputs(&outputs, &read, &lines, ctx.reporter.as_ref())
            .map_err(|e| {
                ProviderError::fatal(e.to_string()).with_help(
                    "the script ran, but an output it wrote failed its gate in `expect` (or it wrote none of that name): its output is in `flow logs FILE STEP`",
                )
            })?;
        Ok(Applied {
            id: None,
            outputs,
            private: Value::Null,
        })
    }
}

impl Default for Exec {
    fn default() -> Self {
        Self::new()
    }
}

/// `inputs` without `destroy`, which only matters when deleting.
fn without_destroy(inputs: &Values) -> Values {
    let mut inputs = inputs.clone();
    inputs.remove("destroy");
    inputs
}

#[async_trait]
impl Provider for Exec {
    fn name(&self) -> &'static str {
        "exec"
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Checks that `workdir`, when known, is an existing folder, and that
    /// the names in `env` can be environment variables' names.
    fn validate(&self, inputs: &[(String, InputValue)], ctx: &ValidateContext) -> Vec<Problem> {
        checks::problems(inputs, &ctx.workdir)
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        self.apply(ctx, inputs).await
    }

    /// Re-runs `run`, unless only `destroy` changed: then the prior outputs stand.
    async fn update(
        &self,
        ctx: &OpContext,
        prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        if without_destroy(prior.inputs) == without_destroy(inputs) {
            return Ok(Applied {
                id: None,
                outputs: prior.outputs.clone(),
                private: prior.private.clone(),
            });
        }
        self.apply(ctx, inputs).await
    }

    /// Runs `destroy` if the step was applied with one; otherwise there is
    /// nothing to delete.
    async fn delete(&self, ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        if prior.inputs.get("destroy").is_some_and(is_sealed) {
            return Err(ProviderError::fatal(
                "`destroy` uses a sensitive value, which state keeps only as a digest; destroy with the workflow file and its secrets available",
            ));
        }
        let inputs = ExecInputs::from_values(prior.inputs)?;
        let Some(destroy) = &inputs.destroy else {
            return Ok(());
        };
        if !inputs.sealed.is_empty() {
            ctx.reporter.log(&format!(
                "`destroy` runs without {}: sensitive values are not kept in state and the workflow did not provide them",
                inputs.sealed.join(", ")
            ));
        }
        self.run_script(
            ctx,
            &inputs,
            "destroy",
            destroy,
            outputs::as_env(prior.outputs),
            false,
        )
        .await?;
        Ok(())
    }

    /// A shell command leaves nothing flow can observe, so whatever an
    /// interrupted command did, this reports [`ReadOutcome::Missing`] and the
    /// engine re-issues it with the same `FLOW_OPERATION_TOKEN`, which the
    /// script may use to be idempotent.
    async fn read(
        &self,
        _ctx: &OpContext,
        _id: Option<&str>,
        _inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        Ok(ReadOutcome::Missing)
    }
}

#[cfg(test)]
mod tests;
