//! Enough of CloudFormation's intrinsic functions to read, before a stack
//! exists, the values a plan-time check needs: `Ref` to a parameter,
//! `Fn::If` on the template's `Conditions` (`Fn::Equals`, `Fn::Not`,
//! `Fn::And`, `Fn::Or`, `Condition`), `Fn::Sub` with parameters and
//! `Fn::ImportValue` through the region's exports. Anything else (a
//! resource's `Ref`, `Fn::GetAtt`, a pseudo parameter) is unknown, and
//! checks leave out what depends on it.

use std::collections::BTreeMap;

use serde_json::Value;

/// What a value evaluates to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Eval {
    /// Known: strings, numbers, lists and maps with every part known.
    Known(Value),
    /// `!Ref AWS::NoValue`: the property is left out.
    NoValue,
    /// Known only once the stack (or another) is made.
    Unknown,
}

/// What a template is evaluated against.
pub(crate) struct Scope<'a> {
    /// The template.
    pub template: &'a Value,
    /// Parameter values given to the stack (defaults come from the template).
    pub params: &'a BTreeMap<String, String>,
    /// The region's exports by name (empty when not read).
    pub exports: &'a BTreeMap<String, String>,
}

impl Scope<'_> {
    /// The value of parameter `name`: given, else its `Default`.
    fn param(&self, name: &str) -> Option<String> {
        self.params.get(name).cloned().or_else(|| {
            self.template
                .pointer(&format!("/Parameters/{name}/Default"))
                .and_then(crate::aws::inputs::scalar_text)
        })
    }

    /// Whether condition `name` of the template holds (`None`: unknown).
    pub(crate) fn condition(&self, name: &str) -> Option<bool> {
        let cond = self.template.pointer(&format!("/Conditions/{name}"))?;
        self.truth(cond)
    }

    fn truth(&self, v: &Value) -> Option<bool> {
        let (f, args) = single(v)?;
        let list = || args.as_array().cloned().unwrap_or_default();
        match f {
            "Condition" => self.condition(args.as_str()?),
            "Fn::Not" => self.truth(list().first()?).map(|b| !b),
            "Fn::And" => list()
                .iter()
                .try_fold(true, |acc, c| Some(acc && self.truth(c)?)),
            "Fn::Or" => list()
                .iter()
                .try_fold(false, |acc, c| Some(acc || self.truth(c)?)),
            "Fn::Equals" => {
                let l = list();
                match (self.eval(l.first()?), self.eval(l.get(1)?)) {
                    (Eval::Known(a), Eval::Known(b)) => Some(text(&a) == text(&b)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Evaluates `v`.
    pub(crate) fn eval(&self, v: &Value) -> Eval {
        match v {
            Value::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    match self.eval(item) {
                        Eval::Known(x) => out.push(x),
                        Eval::NoValue => {}
                        Eval::Unknown => return Eval::Unknown,
                    }
                }
                Eval::Known(Value::Array(out))
            }
            Value::Object(m) => match single(v) {
                Some((f, args)) if f == "Ref" || f.starts_with("Fn::") || f == "Condition" => {
                    self.function(f, args)
                }
                _ => {
                    let mut out = serde_json::Map::new();
                    for (k, x) in m {
                        match self.eval(x) {
                            Eval::Known(x) => {
                                out.insert(k.clone(), x);
                            }
                            Eval::NoValue => {}
                            Eval::Unknown => return Eval::Unknown,
                        }
                    }
                    Eval::Known(Value::Object(out))
                }
            },
            other => Eval::Known(other.clone()),
        }
    }

    fn function(&self, f: &str, args: &Value) -> Eval {
        let known = |o: Option<String>| o.map_or(Eval::Unknown, |s| Eval::Known(Value::String(s)));
        match f {
            "Ref" if args.as_str() == Some("AWS::NoValue") => Eval::NoValue,
            "Ref" => known(args.as_str().and_then(|n| self.param(n))),
            "Fn::If" => {
                let a = args.as_array().cloned().unwrap_or_default();
                match a
                    .first()
                    .and_then(Value::as_str)
                    .and_then(|c| self.condition(c))
                {
                    Some(true) => a.get(1).map_or(Eval::Unknown, |x| self.eval(x)),
                    Some(false) => a.get(2).map_or(Eval::Unknown, |x| self.eval(x)),
                    None => Eval::Unknown,
                }
            }
            "Fn::Sub" => match args {
                Value::String(s) => known(self.sub(s)),
                _ => Eval::Unknown,
            },
            "Fn::ImportValue" => match self.eval(args) {
                Eval::Known(name) => known(self.exports.get(&text(&name)).cloned()),
                _ => Eval::Unknown,
            },
            _ => Eval::Unknown,
        }
    }

    /// `Fn::Sub`'s string form, with parameters only.
    fn sub(&self, s: &str) -> Option<String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let end = after.find('}')?;
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else {
                out.push_str(&self.param(name)?);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Some(out)
    }
}

/// The one key of a one-key map, and its value.
fn single(v: &Value) -> Option<(&str, &Value)> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    m.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// A scalar as text.
pub(crate) fn text(v: &Value) -> String {
    crate::aws::inputs::scalar_text(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> Value {
        json!({
            "Parameters": {
                "Reservation": {"Type": "String", "Default": ""},
                "Block": {"Type": "String", "Default": "false"},
                "Vpc": {"Type": "String"}
            },
            "Conditions": {
                "HasReservation": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Reservation"}, ""]}]},
                "UseBlock": {"Fn::And": [{"Condition": "HasReservation"}, {"Fn::Equals": [{"Ref": "Block"}, "true"]}]}
            }
        })
    }

    #[test]
    fn conditions_parameters_subs_and_imports_evaluate() {
        let t = template();
        let params = BTreeMap::from([
            ("Reservation".to_string(), "cr-1".to_string()),
            ("Vpc".to_string(), "vpc-stack".to_string()),
        ]);
        let exports = BTreeMap::from([("vpc-stack-Subnet".to_string(), "subnet-1".to_string())]);
        let s = Scope {
            template: &t,
            params: &params,
            exports: &exports,
        };
        assert_eq!(s.condition("HasReservation"), Some(true));
        assert_eq!(s.condition("UseBlock"), Some(false));
        let spec = json!({"Fn::If": ["HasReservation",
            {"CapacityReservationTarget": {"CapacityReservationId": {"Ref": "Reservation"}}},
            {"Ref": "AWS::NoValue"}]});
        assert_eq!(
            s.eval(&spec),
            Eval::Known(json!({"CapacityReservationTarget": {"CapacityReservationId": "cr-1"}}))
        );
        let market = json!({"Fn::If": ["UseBlock", {"MarketType": "capacity-block"}, {"Ref": "AWS::NoValue"}]});
        assert_eq!(s.eval(&market), Eval::NoValue);
        assert_eq!(
            s.eval(&json!([{"Fn::ImportValue": {"Fn::Sub": "${Vpc}-Subnet"}}])),
            Eval::Known(json!(["subnet-1"]))
        );
        assert_eq!(
            s.eval(&json!({"Fn::ImportValue": "other-Subnet"})),
            Eval::Unknown
        );
        assert_eq!(s.eval(&json!({"Ref": "SomeResource"})), Eval::Unknown);
        assert_eq!(
            s.eval(&json!({"Fn::Sub": "${!Literal}-${Vpc}"})),
            Eval::Known(json!("${Literal}-vpc-stack"))
        );
        let none = BTreeMap::new();
        let defaults = Scope {
            template: &t,
            params: &none,
            exports: &exports,
        };
        assert_eq!(defaults.condition("HasReservation"), Some(false));
    }
}
