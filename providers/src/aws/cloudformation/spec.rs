//! A stack step's inputs, read and ready for CloudFormation's API.

use std::collections::BTreeMap;

use aws_sdk_cloudformation::types::{Capability, Parameter, Tag};

use super::check::MAX_BODY;
use super::template::template_digest;
use crate::Workdir;
use crate::aws::inputs;
use crate::contract::{ProviderError, Values};

/// What a `cloudformation.stack` step asks for.
#[derive(Debug, Clone)]
pub(super) struct StackSpec {
    /// The stack's name.
    pub name: String,
    /// The template's path as written.
    pub template: String,
    /// The template's text.
    pub body: String,
    /// The SHA-256 of the template's bytes.
    pub digest: String,
    /// Parameter values by name.
    pub params: BTreeMap<String, String>,
    /// Capabilities granted.
    pub caps: Vec<String>,
    /// Tags on the stack (and so on its resources).
    pub tags: BTreeMap<String, String>,
}

impl StackSpec {
    /// Reads the inputs and the template file (relative to `workdir`).
    pub fn load(values: &Values, workdir: &Workdir) -> Result<Self, ProviderError> {
        let template = inputs::req_str(values, "template")?;
        let full = workdir
            .resolve(&template)
            .map_err(ProviderError::bad_input)?;
        let bytes = std::fs::read(full).map_err(|e| {
            ProviderError::fatal(format!("could not read template `{template}`: {e}"))
                .with_help("paths are relative to the workflow file's folder")
        })?;
        if bytes.len() > MAX_BODY {
            return Err(ProviderError::fatal(format!(
                "template `{template}` is {} bytes; CloudFormation takes at most {MAX_BODY} bytes inline",
                bytes.len()
            )).with_help("shorten the template (move large parts into nested stacks)"));
        }
        let body = String::from_utf8(bytes).map_err(|_| {
            ProviderError::fatal(format!("template `{template}` is not UTF-8 text"))
                .with_help("save the template as UTF-8")
        })?;
        let body = crate::substitute::Substitutions::from_values(values)?
            .apply_yaml(&body)
            .map_err(|m| {
                ProviderError::bad_input(format!("template `{template}`:{}: {}", m.line, m.message))
            })?;
        Ok(StackSpec {
            name: inputs::req_str(values, "stack_name")?,
            digest: template_digest(body.as_bytes()),
            body,
            template,
            params: inputs::str_map(values, "parameters")?,
            caps: inputs::str_list(values, "capabilities")?,
            tags: inputs::str_map(values, "tags")?,
        })
    }

    /// The stack's name alone, for looking at a stack whose template is gone.
    pub fn name_only(values: &Values) -> Result<Self, ProviderError> {
        Ok(StackSpec {
            name: inputs::req_str(values, "stack_name")?,
            template: inputs::opt_str(values, "template")?.unwrap_or_default(),
            body: String::new(),
            digest: String::new(),
            params: BTreeMap::new(),
            caps: Vec::new(),
            tags: BTreeMap::new(),
        })
    }

    /// The parameters as CloudFormation takes them.
    pub fn parameters(&self) -> Vec<Parameter> {
        self.params
            .iter()
            .map(|(k, v)| {
                Parameter::builder()
                    .parameter_key(k)
                    .parameter_value(v)
                    .build()
            })
            .collect()
    }

    /// The capabilities as CloudFormation takes them.
    pub fn capabilities(&self) -> Vec<Capability> {
        self.caps
            .iter()
            .map(|c| Capability::from(c.as_str()))
            .collect()
    }
}

/// Tags as CloudFormation takes them.
pub(super) fn aws_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;
    use serde_json::json;

    #[test]
    fn loads_inputs_and_the_template() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.yaml"), "Resources: {}\n").unwrap();
        let spec = StackSpec::load(
            &values(json!({
                "stack_name": "vpc", "template": "t.yaml",
                "parameters": {"Cidr": "10.0.0.0/16", "Azs": ["a", "b"]},
                "capabilities": ["CAPABILITY_IAM"], "tags": {"team": "ml"}
            })),
            &dir.path().into(),
        )
        .unwrap();
        assert_eq!(spec.name, "vpc");
        assert_eq!(spec.body, "Resources: {}\n");
        assert_eq!(spec.params["Azs"], "a,b");
        assert_eq!(spec.parameters().len(), 2);
        assert_eq!(spec.capabilities(), [Capability::CapabilityIam]);
        assert_eq!(spec.digest, template_digest(b"Resources: {}\n"));
        let missing = StackSpec::load(
            &values(json!({"stack_name": "x", "template": "nope.yaml"})),
            &dir.path().into(),
        );
        assert!(
            missing
                .unwrap_err()
                .message
                .contains("could not read template `nope.yaml`")
        );
    }
}
