//! Reading a CloudFormation template offline: JSON, or YAML with the
//! short-form function tags (`!Ref`, `!Sub`, `!GetAtt`, `!ImportValue`, …),
//! into the long form as JSON (`!Ref X` → `{"Ref": "X"}`).
//!
//! YAML goes through `saphyr-parser`'s events, which keep tags (serde-based
//! YAML readers drop or reject them).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Why a template could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// Where, 1-based, when known.
    pub line: Option<usize>,
    /// The column, 1-based, when known.
    pub column: Option<usize>,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{} (line {l}, column {c})", self.message),
            (Some(l), None) => write!(f, "{} (line {l})", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// The SHA-256 of a template's bytes, in hex: what tells one version of the
/// file from another.
pub fn template_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Parses a template; JSON when it starts with `{`, else YAML.
pub(crate) fn parse(text: &str) -> Result<Value, TemplateError> {
    if text.trim_start().starts_with('{') {
        // JSON is YAML too, but JSON's own errors read better for a JSON file.
        return serde_json::from_str(text).or_else(|e| {
            parse_yaml(text).map_err(|_| TemplateError {
                message: format!("not valid JSON: {e}"),
                line: Some(e.line()),
                column: Some(e.column()),
            })
        });
    }
    parse_yaml(text)
}

/// The CloudFormation functions that have a `!Name` short form, each written
/// `Fn::Name` in the long form, except those listed in [`BARE`].
const FUNCTIONS: [&str; 20] = [
    "Base64",
    "Cidr",
    "FindInMap",
    "GetAtt",
    "GetAZs",
    "ImportValue",
    "Join",
    "Select",
    "Split",
    "Sub",
    "Transform",
    "If",
    "Equals",
    "And",
    "Or",
    "Not",
    "ToJsonString",
    "Length",
    "ForEach",
    "Contains",
];

/// Short forms whose long form has no `Fn::` prefix.
const BARE: [&str; 2] = ["Ref", "Condition"];

/// One node of the YAML tree being built.
enum Open {
    /// A sequence and its tag.
    Seq(Vec<Value>, Option<String>, usize),
    /// A mapping, its tag, and the key waiting for its value.
    Map(Map<String, Value>, Option<String>, Option<String>, usize),
}

/// Builds JSON from parser events.
struct Builder {
    stack: Vec<Open>,
    anchors: HashMap<usize, Value>,
    done: Option<Value>,
}

/// A position as a [`TemplateError`] wants it.
fn at(line: usize, col: usize, message: impl Into<String>) -> TemplateError {
    TemplateError {
        message: message.into(),
        line: Some(line),
        column: Some(col + 1),
    }
}

fn parse_yaml(text: &str) -> Result<Value, TemplateError> {
    let mut builder = Builder {
        stack: Vec::new(),
        anchors: HashMap::new(),
        done: None,
    };
    let mut documents = 0;
    for item in Parser::new_from_str(text) {
        let (event, span) = item.map_err(|e| {
            at(
                e.marker().line(),
                e.marker().col(),
                format!("not valid YAML: {}", e.info()),
            )
        })?;
        let (line, col) = (span.start.line(), span.start.col());
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(at(
                        line,
                        col,
                        "a template is one YAML document, this file has more",
                    ));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                let tag = tag_name(tag.as_ref(), line, col)?;
                let value = scalar(&value, style, tag.as_deref());
                builder.value(wrap(value, tag.as_deref(), line, col)?, anchor, line, col)?;
            }
            Event::SequenceStart(anchor, tag) => {
                let tag = tag_name(tag.as_ref(), line, col)?;
                builder.stack.push(Open::Seq(Vec::new(), tag, anchor));
            }
            Event::MappingStart(anchor, tag) => {
                let tag = tag_name(tag.as_ref(), line, col)?;
                builder.stack.push(Open::Map(Map::new(), tag, None, anchor));
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(items, tag, anchor)) = builder.stack.pop() {
                    let v = wrap(Value::Array(items), tag.as_deref(), line, col)?;
                    builder.value(v, anchor, line, col)?;
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(map, tag, _, anchor)) = builder.stack.pop() {
                    let v = wrap(Value::Object(map), tag.as_deref(), line, col)?;
                    builder.value(v, anchor, line, col)?;
                }
            }
            Event::Alias(id) => {
                let v = builder
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| at(line, col, "alias to an unknown anchor"))?;
                builder.value(v, 0, line, col)?;
            }
            _ => {}
        }
    }
    builder.done.ok_or_else(|| TemplateError {
        message: "the template is empty".into(),
        line: None,
        column: None,
    })
}

impl Builder {
    /// Places a finished value in the open collection, or as the document.
    fn value(
        &mut self,
        v: Value,
        anchor: usize,
        line: usize,
        col: usize,
    ) -> Result<(), TemplateError> {
        if anchor > 0 {
            self.anchors.insert(anchor, v.clone());
        }
        match self.stack.last_mut() {
            None => self.done = Some(v),
            Some(Open::Seq(items, ..)) => items.push(v),
            Some(Open::Map(map, _, key, _)) => match key.take() {
                None => {
                    let k = match v {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => "null".into(),
                        _ => return Err(at(line, col, "a mapping key must be a plain value")),
                    };
                    *key = Some(k);
                }
                Some(k) => {
                    if map.contains_key(&k) {
                        return Err(at(
                            line,
                            col,
                            format!("key `{k}` appears twice in the same mapping"),
                        ));
                    }
                    map.insert(k, v);
                }
            },
        }
        Ok(())
    }
}

/// The short name of a local tag (`!Ref` → `Ref`); `None` for no tag or a
/// core-schema one (`!!str`).
fn tag_name(
    tag: Option<&Cow<'_, Tag>>,
    line: usize,
    col: usize,
) -> Result<Option<String>, TemplateError> {
    let Some(tag) = tag else { return Ok(None) };
    if tag.is_yaml_core_schema() {
        return Ok(Some(format!("!!{}", tag.suffix)));
    }
    if tag.handle != "!" {
        return Err(at(line, col, format!("unsupported tag `{tag}`")));
    }
    Ok(Some(tag.suffix.clone()))
}

/// A scalar's value: plain scalars get YAML's core types, quoted and block
/// ones (and anything tagged) stay strings.
fn scalar(text: &str, style: ScalarStyle, tag: Option<&str>) -> Value {
    match tag {
        Some("!!str") => return Value::String(text.into()),
        Some(t) if !t.starts_with("!!") => return Value::String(text.into()),
        _ => {}
    }
    if style != ScalarStyle::Plain {
        return Value::String(text.into());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if let Ok(i) = text.parse::<i64>() {
                return Value::from(i);
            }
            if text.contains(['.', 'e', 'E'])
                && let Ok(f) = text.parse::<f64>()
                && f.is_finite()
            {
                return serde_json::Number::from_f64(f)
                    .map_or(Value::String(text.into()), Value::Number);
            }
            Value::String(text.into())
        }
    }
}

/// `value` under `tag` in the long form: `!Ref X` → `{"Ref": "X"}`,
/// `!GetAtt A.B` → `{"Fn::GetAtt": ["A", "B"]}`, `!Sub s` → `{"Fn::Sub": s}`.
fn wrap(value: Value, tag: Option<&str>, line: usize, col: usize) -> Result<Value, TemplateError> {
    let Some(tag) = tag else { return Ok(value) };
    if tag.starts_with("!!") {
        return Ok(value);
    }
    let key = if BARE.contains(&tag) {
        tag.to_string()
    } else if FUNCTIONS.contains(&tag) {
        format!("Fn::{tag}")
    } else {
        return Err(at(
            line,
            col,
            format!(
                "unknown tag `!{tag}`; CloudFormation's short forms are !Ref, !Condition and !{}",
                FUNCTIONS.join(", !")
            ),
        ));
    };
    let value = match (tag, value) {
        ("GetAtt", Value::String(s)) => match s.split_once('.') {
            Some((resource, attribute)) => Value::Array(vec![resource.into(), attribute.into()]),
            None => {
                return Err(at(
                    line,
                    col,
                    format!("`!GetAtt {s}` needs the form Resource.Attribute"),
                ));
            }
        },
        (_, v) => v,
    };
    let mut map = Map::new();
    map.insert(key, value);
    Ok(Value::Object(map))
}

/// A template parameter as validation needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parameter {
    /// Its logical name.
    pub name: String,
    /// Whether it has a `Default`.
    pub has_default: bool,
    /// Its `AllowedValues`, as text, if any.
    pub allowed: Option<Vec<String>>,
}

/// The parameters `template` declares.
pub(crate) fn parameters(template: &Value) -> Vec<Parameter> {
    let Some(Value::Object(params)) = template.get("Parameters") else {
        return Vec::new();
    };
    params
        .iter()
        .map(|(name, spec)| Parameter {
            name: name.clone(),
            has_default: spec.get("Default").is_some(),
            allowed: spec
                .get("AllowedValues")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter_map(crate::aws::inputs::scalar_text)
                        .collect()
                }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VPC: &str = r#"
AWSTemplateFormatVersion: '2010-09-09'
Description: A VPC
Parameters:
  VpcCidr:
    Type: String
    Default: 10.0.0.0/16
  Name:
    Type: String
    AllowedValues: [a, b]
Conditions:
  IsA: !Equals [!Ref Name, a]
Resources:
  Vpc:
    Type: AWS::EC2::VPC
    Properties:
      CidrBlock: !Ref VpcCidr
      Tags:
        - Key: Name
          Value: !Sub "${AWS::StackName}-vpc"
  Subnet:
    Type: AWS::EC2::Subnet
    Condition: IsA
    Properties:
      VpcId: !Ref Vpc
      AvailabilityZone: !Select [0, !GetAZs '']
      CidrBlock: !Select [0, !Cidr [!GetAtt Vpc.CidrBlock, 4, 8]]
      Other: !If [IsA, !ImportValue shared-sg, !Ref "AWS::NoValue"]
      Joined: !Join [",", [!GetAtt [Vpc, DefaultSecurityGroup], x]]
      Block: |
        line one
      Count: 3
      Ratio: 0.5
      Flag: true
      Quoted: "true"
Outputs:
  VpcId:
    Value: !Ref Vpc
    Export:
      Name: !Sub "${AWS::StackName}-VpcId"
"#;

    #[test]
    fn short_forms_become_long_forms() {
        let t = parse(VPC).unwrap();
        let subnet = &t["Resources"]["Subnet"]["Properties"];
        assert_eq!(
            t["Resources"]["Vpc"]["Properties"]["CidrBlock"],
            json!({"Ref": "VpcCidr"})
        );
        assert_eq!(
            subnet["AvailabilityZone"],
            json!({"Fn::Select": [0, {"Fn::GetAZs": ""}]})
        );
        assert_eq!(
            subnet["CidrBlock"],
            json!({"Fn::Select": [0, {"Fn::Cidr": [{"Fn::GetAtt": ["Vpc", "CidrBlock"]}, 4, 8]}]})
        );
        assert_eq!(
            subnet["Other"],
            json!({"Fn::If": ["IsA", {"Fn::ImportValue": "shared-sg"}, {"Ref": "AWS::NoValue"}]})
        );
        assert_eq!(
            subnet["Joined"],
            json!({"Fn::Join": [",", [{"Fn::GetAtt": ["Vpc", "DefaultSecurityGroup"]}, "x"]]})
        );
        assert_eq!(subnet["Block"], json!("line one\n"));
        assert_eq!(subnet["Count"], json!(3));
        assert_eq!(subnet["Ratio"], json!(0.5));
        assert_eq!(subnet["Flag"], json!(true));
        assert_eq!(subnet["Quoted"], json!("true"));
        assert_eq!(
            t["Conditions"]["IsA"],
            json!({"Fn::Equals": [{"Ref": "Name"}, "a"]})
        );
        assert_eq!(
            t["Outputs"]["VpcId"]["Export"]["Name"],
            json!({"Fn::Sub": "${AWS::StackName}-VpcId"})
        );
    }

    #[test]
    fn parameters_are_listed_with_defaults_and_allowed_values() {
        let t = parse(VPC).unwrap();
        let params = parameters(&t);
        assert_eq!(params.len(), 2);
        let get = |n: &str| params.iter().find(|p| p.name == n).unwrap();
        assert!(get("VpcCidr").has_default);
        assert!(!get("Name").has_default);
        assert_eq!(get("Name").allowed, Some(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn json_templates_parse_too() {
        let t = parse(r#"{"Parameters": {"A": {"Type": "String"}}, "Resources": {}}"#).unwrap();
        assert_eq!(parameters(&t)[0].name, "A");
        let err = parse("{\"Resources\": ").unwrap_err();
        assert!(err.message.starts_with("not valid JSON"), "{err}");
        assert_eq!(err.line, Some(1));
    }

    #[test]
    fn errors_point_at_the_place() {
        let err = parse("Resources:\n  A: !Reff B\n").unwrap_err();
        assert!(err.message.contains("unknown tag `!Reff`"), "{err}");
        assert_eq!(err.line, Some(2));
        let err = parse("Resources:\n  A: [1, 2\n").unwrap_err();
        assert!(err.message.starts_with("not valid YAML"), "{err}");
        let err = parse("A: 1\nA: 2\n").unwrap_err();
        assert!(err.message.contains("appears twice"), "{err}");
        let err = parse("A: !GetAtt Vpc\n").unwrap_err();
        assert!(err.message.contains("Resource.Attribute"), "{err}");
        assert!(parse("").is_err());
    }

    #[test]
    fn anchors_and_aliases_are_resolved() {
        let t = parse("a: &x {k: 1}\nb: *x\n").unwrap();
        assert_eq!(t["b"], json!({"k": 1}));
    }

    #[test]
    fn digests_differ_by_content() {
        assert_eq!(template_digest(b"a").len(), 64);
        assert_ne!(template_digest(b"a"), template_digest(b"b"));
    }
}
