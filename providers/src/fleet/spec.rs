//! The inputs every node check kind shares (`check`, `pairs`, `policy`,
//! `max_bad_fraction`), read for apply and checked for validate, the same
//! on every platform; what differs (the job a table runs, the policy that
//! takes a node out) comes from the kind's [`Platform`].

use serde_json::Value;

use crate::capture::Matchers;
use crate::contract::{InputValue, Problem, ProviderError, Values};

/// What a node check kind says of its platform.
#[derive(Debug, Clone, Copy)]
pub struct Platform {
    /// The kind (`kube.node_check`).
    pub kind: &'static str,
    /// The policy that takes a bad node out there (`cordon`, `drain`).
    pub take_out: &'static str,
    /// What it does, for messages (`cordoned, tainted flow.dev/unhealthy and drained`).
    pub take_out_means: &'static str,
    /// Another platform's take-out policy and where it belongs, refused
    /// here with a pointer to this one's (`("drain", "Slurm's (slurm.node_check)")`).
    pub elsewhere: (&'static str, &'static str),
    /// What `replace` would do there, still to come.
    pub replace_later: &'static str,
    /// The keys of the job in a `check` or `pairs` table.
    pub job_keys: &'static [&'static str],
    /// One of these keys must be in a table: the job to run.
    pub job_needs: &'static [&'static str],
    /// What `job_needs` is, for its message (`` `files` or `manifest`: the job to run ``).
    pub job_needs_text: &'static str,
}

/// The kinds where policy `replace` is built, each with what it does
/// there: a capability of the kind, not of [`Platform`] (whose `replace_later`
/// says what it will do where it is not built yet).
pub const REPLACES: &[(&str, &str)] = &[
    (
        "kube.node_check",
        "cordoned, tainted and drained, its instance terminated through its Auto Scaling group with the desired count kept, the new node waited for and checked",
    ),
    (
        "kube.job",
        "cordoned, tainted and drained, its instance terminated through its Auto Scaling group with the desired count kept, the new node waited for before the next attempt",
    ),
];

/// What is done with the nodes found bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Fail the step, naming them.
    Fail,
    /// Take them out as the platform does (cordon, drain); the step
    /// succeeds. Policy `replace` takes them out too, then replaces them
    /// ([`Common::replace`]).
    TakeOut,
}

/// How many of a device each node must list: its GPUs (`check.gpus`, as
/// `nvidia-smi` lists them) or its EFA devices (`check.efa`, as `fi_info`
/// does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpus {
    /// As many as the node's instance type has (flow's tables).
    InstanceType,
    /// This many.
    Count(u32),
}

/// The keys of a `check` table besides the job's.
pub const CHECK_KEYS: &[&str] = &[
    "success_pattern",
    "capture",
    "parse",
    "expect",
    "gpus",
    "efa",
    "dcgm",
];

/// The keys of a `pairs` table besides the job's.
pub const PAIR_KEYS: &[&str] = &["floor", "of_median"];

/// What every node check kind reads of its inputs.
#[derive(Debug, Clone)]
pub struct Common {
    /// The check each node runs alone (its job and how its output is judged).
    pub check: Option<Values>,
    /// The GPU count the check's `nvidia-smi` must list.
    pub gpus: Option<Gpus>,
    /// The EFA devices the check's `fi_info -p efa` must list.
    pub efa: Option<Gpus>,
    /// Whether the check's `dcgmi diag` table is judged (`check.dcgm`).
    pub dcgm: bool,
    /// The test each pair of nodes runs (an NCCL job).
    pub pairs: Option<Values>,
    /// The instance type's bus bandwidth floor, GB/s.
    pub floor: Option<f64>,
    /// The fraction of the fleet's median below which a pair is bad.
    pub of_median: f64,
    /// What is done with bad nodes.
    pub policy: Policy,
    /// Policy `replace`: the nodes taken out (`policy` is `TakeOut`) are
    /// replaced by the platform and the new ones checked.
    pub replace: bool,
    /// The most of the fleet that may be found bad and taken out.
    pub max_bad_fraction: f64,
}

/// What a node's check output is held to besides its job's matchers: the
/// GPUs `nvidia-smi` lists, the EFA devices `fi_info` lists, the tests of
/// `dcgmi diag`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// `check.gpus`.
    pub gpus: Option<Gpus>,
    /// `check.efa`.
    pub efa: Option<Gpus>,
    /// `check.dcgm`.
    pub dcgm: bool,
}

impl Rules {
    /// What the plan says a node's check is held to, after its job
    /// (`, nvidia-smi listing its instance type's GPUs, …`); empty without
    /// a rule.
    pub fn plan_text(&self) -> String {
        let mut out = String::new();
        match self.gpus {
            Some(Gpus::InstanceType) => {
                out.push_str(", nvidia-smi listing its instance type's GPUs")
            }
            Some(Gpus::Count(_)) => out.push_str(", nvidia-smi listing check.gpus GPUs"),
            None => {}
        }
        match self.efa {
            Some(Gpus::InstanceType) => {
                out.push_str(", fi_info listing its instance type's EFA devices")
            }
            Some(Gpus::Count(_)) => out.push_str(", fi_info listing check.efa EFA devices"),
            None => {}
        }
        if self.dcgm {
            out.push_str(", no dcgmi diag test failing (skipped where dcgmi is not installed)");
        }
        out
    }
}

impl Common {
    /// The rules of its `check`.
    pub fn rules(&self) -> Rules {
        Rules {
            gpus: self.gpus,
            efa: self.efa,
            dcgm: self.dcgm,
        }
    }
}

/// The table `key` of `v`, when it is one.
pub fn table(v: &Values, key: &str) -> Option<Values> {
    v.get(key).and_then(Value::as_object).cloned()
}

/// A number, or text that is one (`"${vars.min_busbw}"` may arrive as either).
pub fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// `check.gpus`: a count (1 to 64) or `"instance-type"`.
pub fn gpus_of(v: &Value) -> Result<Gpus, String> {
    match v {
        Value::String(s) if s == "instance-type" => Ok(Gpus::InstanceType),
        Value::Number(n) => n
            .as_u64()
            .filter(|n| (1..=64).contains(n))
            .map(|n| Gpus::Count(n as u32))
            .ok_or_else(|| format!("`{n}` is not a GPU count (1 to 64)")),
        other => Err(format!(
            "`{other}` is neither a GPU count nor \"instance-type\""
        )),
    }
}

/// `check.efa`: a count of EFA devices (1 to 32, the most an instance type
/// has) or `"instance-type"`.
pub fn efa_of(v: &Value) -> Result<Gpus, String> {
    match v {
        Value::String(s) if s == "instance-type" => Ok(Gpus::InstanceType),
        Value::Number(n) => n
            .as_u64()
            .filter(|n| (1..=32).contains(n))
            .map(|n| Gpus::Count(n as u32))
            .ok_or_else(|| format!("`{n}` is not an EFA device count (1 to 32)")),
        other => Err(format!(
            "`{other}` is neither an EFA device count nor \"instance-type\""
        )),
    }
}

/// `max_bad_fraction`: a number (or its text) above 0 and below 1.
pub fn fraction_of(v: &Value) -> Result<f64, Problem> {
    match number(v) {
        Some(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err(Problem::at(
            "max_bad_fraction",
            format!(
                "{v} is not a fraction of the fleet: give one above 0 and below 1 (0.25 by default)"
            ),
        )),
    }
}

impl Platform {
    /// What policy `replace` does on this platform, where it is built.
    pub fn replaces(&self) -> Option<&'static str> {
        REPLACES
            .iter()
            .find(|(kind, _)| *kind == self.kind)
            .map(|(_, what)| *what)
    }

    /// The policies, as written.
    pub fn policies(&self) -> String {
        match self.replaces() {
            Some(what) => format!(
                "`fail` (the step fails naming them), `{}` ({}) or `replace` ({what})",
                self.take_out, self.take_out_means
            ),
            None => format!(
                "`fail` (the step fails naming them) or `{}` ({})",
                self.take_out, self.take_out_means
            ),
        }
    }

    /// `policy`, read: `fail`, the platform's take-out policy, or
    /// `replace` where the platform has it (read as `TakeOut`: see
    /// [`Platform::replaces_by`]); `replace` elsewhere (not built yet),
    /// another platform's policy and a misspelling are refused at the entry.
    pub fn policy_of(&self, text: &str) -> Result<Policy, Problem> {
        let (foreign, whose) = self.elsewhere;
        match text {
            "fail" => Ok(Policy::Fail),
            t if t == self.take_out => Ok(Policy::TakeOut),
            "replace" if self.replaces().is_some() => Ok(Policy::TakeOut),
            "replace" => Err(Problem::at(
                "policy",
                format!(
                    "policy `replace` is not built yet for {}: {} is still to come",
                    self.kind, self.replace_later
                ),
            )
            .with_help(format!(
                "use {}; then replace the {} nodes by hand",
                self.policies(),
                past(self.take_out)
            ))),
            t if t == foreign => Err(Problem::at(
                "policy",
                format!(
                    "policy `{foreign}` is {whose}: on {} a bad node is {}",
                    self.kind,
                    past(self.take_out)
                ),
            )
            .with_help(format!("use {}", self.policies()))),
            other => {
                let mut p = Problem::at(
                    "policy",
                    format!(
                        "`{other}` is not a policy: a bad node's policy is {}",
                        self.policies()
                    ),
                );
                if other == "report" {
                    p = p.with_help(
                        "`fail` reports every bad node with its evidence and fails the step, taking none out",
                    );
                } else if let Some(c) =
                    crate::suggest::closest(other, ["fail", self.take_out, "replace"])
                {
                    p = p.with_help(format!("did you mean `{c}`?"));
                }
                Err(p)
            }
        }
    }

    /// Whether `policy` (as written) asks for the bad nodes to be replaced
    /// here (never where [`Platform::replaces`] has nothing).
    pub fn replaces_by(&self, policy: Option<&str>) -> bool {
        policy == Some("replace") && self.replaces().is_some()
    }

    /// The inputs every kind shares, read for an apply. Limits that came
    /// through a reference (unknown at validate) are checked here again: a
    /// fraction of 1.5 would let every node be taken out.
    pub fn common(&self, v: &Values) -> Result<Common, ProviderError> {
        let invalid = |p: Problem| ProviderError::invalid(p.message).before_acting();
        let check = table(v, "check");
        let pairs = table(v, "pairs");
        let num = |t: &Option<Values>, k: &str| t.as_ref().and_then(|t| number(t.get(k)?));
        Ok(Common {
            gpus: check
                .as_ref()
                .and_then(|c| c.get("gpus"))
                .map(gpus_of)
                .transpose()
                .map_err(|e| invalid(Problem::at("check", e)))?,
            efa: check
                .as_ref()
                .and_then(|c| c.get("efa"))
                .map(efa_of)
                .transpose()
                .map_err(|e| invalid(Problem::at("check", e)))?,
            dcgm: check
                .as_ref()
                .and_then(|c| c.get("dcgm"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
            floor: num(&pairs, "floor"),
            of_median: num(&pairs, "of_median").unwrap_or(0.8),
            check,
            pairs,
            policy: self
                .policy_of(v.get("policy").and_then(Value::as_str).unwrap_or("fail"))
                .map_err(invalid)?,
            replace: self.replaces_by(v.get("policy").and_then(Value::as_str)),
            max_bad_fraction: v
                .get("max_bad_fraction")
                .map(fraction_of)
                .transpose()
                .map_err(invalid)?
                .unwrap_or(0.25),
        })
    }

    /// The problems of the shared inputs, for validate, each at its entry.
    pub fn problems(&self, inputs: &[(String, InputValue)]) -> Vec<Problem> {
        let known = crate::contract::known_inputs(inputs);
        let has = |k: &str| inputs.iter().any(|(n, _)| n == k);
        let mut out = Vec::new();
        if !has("check") && !has("pairs") {
            out.push(Problem::at_path(
                &[],
                "give `check` (a job each node runs alone), `pairs` (an NCCL test each pair of nodes runs), or both",
            ));
        }
        if let Some(text) = known.get("policy").and_then(Value::as_str)
            && let Err(p) = self.policy_of(text)
        {
            out.push(p);
        }
        if let Some(Err(p)) = known.get("max_bad_fraction").map(fraction_of) {
            out.push(p);
        }
        for name in ["check", "pairs"] {
            if let Some(t) = table(&known, name) {
                out.extend(self.table_problems(name, &t));
            }
        }
        out
    }

    /// The problems of the `check` or `pairs` table.
    fn table_problems(&self, name: &str, t: &Values) -> Vec<Problem> {
        let own = if name == "check" {
            CHECK_KEYS
        } else {
            PAIR_KEYS
        };
        let keys: Vec<&str> = self.job_keys.iter().chain(own).copied().collect();
        let mut out = Vec::new();
        for k in t.keys().filter(|k| !keys.contains(&k.as_str())) {
            let mut p = Problem::at_path(&[name, k], format!("`{name}` takes no `{k}`")).on_key();
            p = match crate::suggest::closest(k, keys.iter().copied()) {
                Some(c) => p.with_help(format!(
                    "did you mean `{c}`? `{name}` takes {}",
                    keys.join(", ")
                )),
                None => p.with_help(format!("`{name}` takes {}", keys.join(", "))),
            };
            out.push(p);
        }
        if !self.job_needs.iter().any(|k| t.contains_key(*k)) {
            out.push(Problem::at(
                name,
                format!("`{name}` needs {}", self.job_needs_text),
            ));
        }
        let within = |p: Problem| {
            let mut path = vec![name.to_string()];
            path.extend(p.path);
            Problem { path, ..p }
        };
        if name == "check" {
            out.extend(Matchers::problems(t).into_iter().map(within));
            if let Some(g) = t.get("gpus")
                && let Err(e) = gpus_of(g)
            {
                out.push(Problem::at_path(&["check", "gpus"], e).with_help(
                    "a number, or \"instance-type\" for the count of the node's instance type",
                ));
            }
            if let Some(g) = t.get("efa")
                && let Err(e) = efa_of(g)
            {
                out.push(Problem::at_path(&["check", "efa"], e).with_help(
                    "a number, or \"instance-type\" for the EFA interfaces of the node's instance type (`fi_info -p efa -t FI_EP_RDM` lists them)",
                ));
            }
            if let Some(d) = t.get("dcgm")
                && !d.is_boolean()
            {
                out.push(
                    Problem::at_path(&["check", "dcgm"], format!("`{d}` is not true or false"))
                        .with_help("true judges the `dcgmi diag` table the check prints: a test that fails makes the node bad"),
                );
            }
        } else {
            for k in PAIR_KEYS.iter().copied() {
                if let Some(v) = t.get(k)
                    && number(v).is_none_or(|f| f <= 0.0)
                {
                    out.push(Problem::at_path(
                        &["pairs", k],
                        format!("`{v}` is not a positive number"),
                    ));
                }
            }
        }
        out
    }
}

/// `cordon` → `cordoned`, `drain` → `drained`.
fn past(policy: &str) -> String {
    format!("{policy}ed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SLURM: Platform = Platform {
        kind: "slurm.node_check",
        take_out: "drain",
        take_out_means: "drained in Slurm",
        elsewhere: ("cordon", "EKS's (kube.node_check)"),
        replace_later: "the platform's replacement of a drained node",
        job_keys: &["script", "args"],
        job_needs: &["script"],
        job_needs_text: "`script`: the batch script to run",
    };

    use crate::testing::known;

    #[test]
    fn policies_are_fail_and_the_platforms_own() {
        assert_eq!(SLURM.policy_of("fail").unwrap(), Policy::Fail);
        assert_eq!(SLURM.policy_of("drain").unwrap(), Policy::TakeOut);
        let p = SLURM.policy_of("replace").unwrap_err();
        assert!(
            p.message.contains("not built yet for slurm.node_check"),
            "{}",
            p.message
        );
        assert!(
            p.help
                .unwrap()
                .contains("replace the drained nodes by hand")
        );
        let p = SLURM.policy_of("cordon").unwrap_err();
        assert_eq!(
            p.message,
            "policy `cordon` is EKS's (kube.node_check): on slurm.node_check a bad node is drained"
        );
        let p = SLURM.policy_of("dran").unwrap_err();
        assert_eq!(p.path, ["policy"]);
        assert_eq!(p.help.as_deref(), Some("did you mean `drain`?"));
        let p = SLURM.policy_of("report").unwrap_err();
        assert!(p.help.unwrap().starts_with("`fail` reports"));
    }

    #[test]
    fn problems_inside_the_tables_point_into_them() {
        let p = SLURM.problems(&known(json!({
            "check": {"script": "c.sbatch", "expect": {"gpu": ">= 8"}, "gpus": "all", "scrpt": 1},
            "pairs": {"args": [], "floor": -1},
            "max_bad_fraction": 1.5,
        })));
        let paths: Vec<String> = p.iter().map(|p| p.path.join(".")).collect();
        for want in [
            "check.expect.gpu",
            "check.gpus",
            "check.scrpt",
            "pairs",
            "pairs.floor",
            "max_bad_fraction",
        ] {
            assert!(paths.contains(&want.to_string()), "{want}: {paths:?}");
        }
        let misspelt = p
            .iter()
            .find(|p| p.path.join(".") == "check.scrpt")
            .unwrap();
        assert!(
            misspelt
                .help
                .as_deref()
                .unwrap()
                .starts_with("did you mean `script`?")
        );
        assert!(SLURM.problems(&known(json!({})))[0].path.is_empty());
    }

    #[test]
    fn apply_refuses_limits_validate_could_not_see() {
        let with = |k: &str, v: Value| {
            let mut all = json!({"check": {"script": "c.sbatch"}});
            all[k] = v;
            serde_json::from_value::<Values>(all).unwrap()
        };
        let e = SLURM
            .common(&with("max_bad_fraction", json!(1.5)))
            .unwrap_err();
        assert!(
            e.message.contains("is not a fraction of the fleet"),
            "{}",
            e.message
        );
        let ok = SLURM
            .common(&with("max_bad_fraction", json!("0.3")))
            .unwrap();
        assert_eq!(ok.max_bad_fraction, 0.3);
        assert_eq!(ok.policy, Policy::Fail);
        let e = SLURM.common(&with("policy", json!("cordon"))).unwrap_err();
        assert!(e.message.contains("is EKS's"), "{}", e.message);
    }
}
