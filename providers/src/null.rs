//! The `null` provider: a virtual resource that echoes its inputs as outputs.
//!
//! It touches nothing outside flow, which makes it the provider of choice for
//! trying a workflow's shape and for testing the engine: a few optional
//! control inputs make it slow (`delay_ms`), fail (`fail`, `fail_destroy`) or
//! fail transiently a given number of times (`fail_times`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::contract::{
    Applied, DeclaredOutputs, InputSpec, InputType, InputValue, OpContext, Prior, Problem,
    Provider, ProviderError, ReadOutcome, Schema, StepKind, ValidateContext, Values,
};

/// The `null` provider kind. Accepts any inputs and echoes all of them back
/// as outputs.
#[derive(Debug, Clone)]
pub struct Null {
    /// What [`Provider::schema`] returns.
    schema: Schema,
}

impl Null {
    /// The provider with its schema.
    pub fn new() -> Self {
        Null {
            schema: Schema {
                kind: StepKind::Resource,
                description: "A virtual resource whose outputs are its inputs; for trying and testing workflows",
                inputs: vec![
                    InputSpec::optional(
                        "delay_ms",
                        InputType::Integer,
                        "Milliseconds that create, update and delete take",
                    ),
                    InputSpec::optional("fail", InputType::Bool, "Make create and update fail"),
                    InputSpec::optional("fail_destroy", InputType::Bool, "Make delete fail"),
                    InputSpec::optional(
                        "fail_times",
                        InputType::Integer,
                        "Make the first N create or update calls of an operation fail with a retryable error",
                    ),
                ],
                open_inputs: true,
            },
        }
    }
}

impl Default for Null {
    fn default() -> Self {
        Self::new()
    }
}

/// The inputs that must be whole numbers of at least zero.
const COUNTS: [&str; 2] = ["delay_ms", "fail_times"];

/// How many create or update calls each operation token has made so far.
fn attempts() -> &'static Mutex<HashMap<String, u64>> {
    static ATTEMPTS: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    ATTEMPTS.get_or_init(Default::default)
}

/// The count input `name`, zero when unset.
fn count(inputs: &Values, name: &str) -> Result<u64, ProviderError> {
    match inputs.get(name) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value.as_u64().ok_or_else(|| {
            ProviderError::bad_input(format!(
                "`{name}` must be a whole number of at least 0, not {value}"
            ))
        }),
    }
}

/// Whether the flag input `name` is `true`.
fn flag(inputs: &Values, name: &str) -> bool {
    inputs.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// Sleeps for `delay_ms`, if set.
async fn delay(inputs: &Values) -> Result<(), ProviderError> {
    let ms = count(inputs, "delay_ms")?;
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    Ok(())
}

/// Create and update: wait, fail as asked, else echo the inputs.
async fn apply(ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
    delay(inputs).await?;
    if flag(inputs, "fail") {
        return Err(ProviderError::fatal("step failed because `fail = true`")
            .with_help("remove `fail = true` from the step's inputs"));
    }
    let fail_times = count(inputs, "fail_times")?;
    if fail_times > 0 {
        let attempt = {
            let mut attempts = attempts().lock().unwrap_or_else(|e| e.into_inner());
            let n = attempts.entry(ctx.token.clone()).or_insert(0);
            *n += 1;
            *n
        };
        if attempt <= fail_times {
            return Err(ProviderError::retryable(format!(
                "transient failure {attempt} of {fail_times} (fail_times)"
            )));
        }
    }
    Ok(echo(inputs))
}

/// The object `null` "creates": outputs equal to the inputs.
fn echo(inputs: &Values) -> Applied {
    Applied {
        id: None,
        outputs: inputs.clone(),
        private: Value::Null,
    }
}

#[async_trait]
impl Provider for Null {
    fn name(&self) -> &'static str {
        "null"
    }

    /// Its inputs, echoed: one known only at apply may be null then, and
    /// absent (as an input whose value is null is not written).
    fn declared_outputs(
        &self,
        inputs: &[(String, InputValue)],
        _ctx: &ValidateContext,
    ) -> Option<DeclaredOutputs> {
        let mut out = DeclaredOutputs {
            source: "a null step echoes its inputs".into(),
            ..DeclaredOutputs::default()
        };
        for (name, value) in inputs {
            if !out.keys.contains(name) {
                out.keys.push(name.clone());
            }
            if matches!(value, InputValue::Unknown) && !out.conditional.contains(name) {
                out.conditional.push(name.clone());
            }
        }
        Some(out)
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn validate(&self, inputs: &[(String, InputValue)], _ctx: &ValidateContext) -> Vec<Problem> {
        inputs
            .iter()
            .filter(|(name, _)| COUNTS.contains(&name.as_str()))
            .filter_map(|(name, value)| match value {
                InputValue::Known(v @ Value::Number(n)) if n.as_u64().is_none() => Some(
                    Problem::at(name, format!("`{name}` must be at least 0, not {v}")),
                ),
                _ => None,
            })
            .collect()
    }

    async fn create(&self, ctx: &OpContext, inputs: &Values) -> Result<Applied, ProviderError> {
        apply(ctx, inputs).await
    }

    async fn update(
        &self,
        ctx: &OpContext,
        _prior: Prior<'_>,
        inputs: &Values,
    ) -> Result<Applied, ProviderError> {
        apply(ctx, inputs).await
    }

    /// Waits `delay_ms`, then fails if the step was applied with `fail_destroy = true`.
    /// Deleting an object that is not there succeeds, as it always does here.
    async fn delete(&self, _ctx: &OpContext, prior: Prior<'_>) -> Result<(), ProviderError> {
        delay(prior.inputs).await?;
        if flag(prior.inputs, "fail_destroy") {
            return Err(ProviderError::fatal(
                "delete failed because `fail_destroy = true`",
            ));
        }
        Ok(())
    }

    /// The object is virtual, so whatever an interrupted operation did, the
    /// result is the inputs echoed back: adopting it is always right.
    async fn read(
        &self,
        _ctx: &OpContext,
        _id: Option<&str>,
        inputs: &Values,
    ) -> Result<ReadOutcome, ProviderError> {
        Ok(ReadOutcome::Present(echo(inputs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{op_context, values};
    use serde_json::json;

    fn prior(inputs: &Values) -> Prior<'_> {
        Prior {
            id: None,
            inputs,
            outputs: inputs,
            private: &Value::Null,
        }
    }

    #[tokio::test]
    async fn create_and_update_echo_the_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "echo", "null-echo");
        let inputs = values(json!({"name": "a", "size": 3, "tags": {"k": "v"}}));
        let applied = Null::new().create(&ctx, &inputs).await.unwrap();
        assert_eq!(applied.outputs, inputs);
        assert_eq!(applied.id, None);
        let changed = values(json!({"name": "b"}));
        let applied = Null::new()
            .update(&ctx, prior(&inputs), &changed)
            .await
            .unwrap();
        assert_eq!(applied.outputs, changed);
    }

    #[tokio::test]
    async fn delay_completes() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "slow", "null-delay");
        let inputs = values(json!({"delay_ms": 20}));
        let applied = Null::new().create(&ctx, &inputs).await.unwrap();
        assert_eq!(applied.outputs, inputs);
        Null::new().delete(&ctx, prior(&inputs)).await.unwrap();
    }

    #[tokio::test]
    async fn fail_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "bad", "null-fail");
        let err = Null::new()
            .create(&ctx, &values(json!({"fail": true})))
            .await
            .unwrap_err();
        assert!(!err.is_retryable());
        assert_eq!(err.message, "step failed because `fail = true`");
    }

    #[tokio::test]
    async fn fail_times_fails_retryably_then_succeeds_with_the_same_token() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "flaky", "null-fail-times");
        let inputs = values(json!({"fail_times": 2}));
        let null = Null::new();
        for k in 1..=2 {
            let err = null.create(&ctx, &inputs).await.unwrap_err();
            assert!(err.is_retryable());
            assert_eq!(
                err.message,
                format!("transient failure {k} of 2 (fail_times)")
            );
        }
        assert_eq!(null.create(&ctx, &inputs).await.unwrap().outputs, inputs);
        // Another operation counts from the start.
        let (other, _) = op_context(dir.path(), "flaky", "null-fail-times-2");
        assert!(
            null.create(&other, &inputs)
                .await
                .unwrap_err()
                .is_retryable()
        );
    }

    #[tokio::test]
    async fn delete_fails_only_with_fail_destroy() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "gone", "null-delete");
        let null = Null::new();
        null.delete(&ctx, prior(&values(json!({})))).await.unwrap();
        let failing = values(json!({"fail_destroy": true}));
        let err = null.delete(&ctx, prior(&failing)).await.unwrap_err();
        assert!(!err.is_retryable());
        assert!(err.message.contains("fail_destroy"));
    }

    #[tokio::test]
    async fn read_adopts_the_echo() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "adopt", "null-read");
        let inputs = values(json!({"name": "a"}));
        let outcome = Null::new().read(&ctx, None, &inputs).await.unwrap();
        assert_eq!(
            outcome,
            ReadOutcome::Present(Applied {
                id: None,
                outputs: inputs,
                private: Value::Null,
            })
        );
    }

    /// The keys validate expects are those the step echoes; one known only
    /// at apply may be absent.
    #[tokio::test]
    async fn declared_outputs_are_the_inputs_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _) = op_context(dir.path(), "echo", "null-declared");
        let inputs = values(json!({"name": "a", "delay_ms": 1, "tags": {"k": "v"}}));
        let listed: Vec<(String, InputValue)> = inputs
            .iter()
            .map(|(k, v)| (k.clone(), InputValue::Known(v.clone())))
            .chain([("later".to_string(), InputValue::Unknown)])
            .collect();
        let vctx = ValidateContext {
            workdir: ".".into(),
        };
        let declared = Null::new().declared_outputs(&listed, &vctx).unwrap();
        assert_eq!(declared.conditional, ["later"]);
        let applied = Null::new().create(&ctx, &inputs).await.unwrap();
        let known: Vec<&String> = declared
            .keys
            .iter()
            .filter(|k| !declared.conditional.contains(k))
            .collect();
        assert_eq!(
            applied.outputs.keys().collect::<Vec<_>>().len(),
            known.len()
        );
        assert!(known.iter().all(|k| applied.outputs.contains_key(*k)));
    }

    #[test]
    fn validate_rejects_negative_counts() {
        let ctx = ValidateContext {
            workdir: ".".into(),
        };
        let inputs = vec![
            ("delay_ms".to_string(), InputValue::Known(json!(-5))),
            ("fail_times".to_string(), InputValue::Known(json!(1))),
            ("other".to_string(), InputValue::Known(json!(-1))),
            ("fail_times".to_string(), InputValue::Unknown),
        ];
        let problems = Null::new().validate(&inputs, &ctx);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, vec!["delay_ms".to_string()]);
    }
}
