//! The EFA interface count of each instance type, from the one data file
//! `providers/data/efa-instance-types.csv` (its header names its source).

use std::sync::OnceLock;

/// The data file, built in.
const TABLE: &str = include_str!("../../data/efa-instance-types.csv");

/// What flow knows offline of an instance type's EFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The type takes at most this many EFA interfaces (at least 1).
    Efa(u32),
    /// The type has no EFA.
    NoEfa,
    /// The type is not in the table.
    Unknown,
}

/// The table's rows: type and interface count (0: no EFA).
fn rows() -> &'static [(&'static str, u32)] {
    static ROWS: OnceLock<Vec<(&'static str, u32)>> = OnceLock::new();
    ROWS.get_or_init(|| {
        TABLE
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let (t, n) = l.split_once(',')?;
                Some((t.trim(), n.trim().parse().ok()?))
            })
            .collect()
    })
}

/// What the table says of `instance_type` (`p5.48xlarge` → `Efa(32)`).
pub fn lookup(instance_type: &str) -> Lookup {
    match rows().iter().find(|(t, _)| *t == instance_type) {
        Some((_, 0)) => Lookup::NoEfa,
        Some((_, n)) => Lookup::Efa(*n),
        None => Lookup::Unknown,
    }
}

/// The number of EFA interfaces of `instance_type`, if it has EFA and the
/// table knows it.
pub fn interfaces(instance_type: &str) -> Option<u32> {
    match lookup(instance_type) {
        Lookup::Efa(n) => Some(n),
        _ => None,
    }
}

/// The types of `instance_type`'s family that have EFA, with their counts
/// (`p5.48xlarge (32), p5.4xlarge (1)`); empty when none has.
fn family_with_efa(instance_type: &str) -> String {
    let family = instance_type.split('.').next().unwrap_or(instance_type);
    rows()
        .iter()
        .filter(|(t, n)| *n > 0 && t.split('.').next() == Some(family))
        .map(|(t, n)| format!("{t} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why EFA cannot be turned on for `instance_type`, and the fix: `None`
/// when the type has EFA. `unknown_is_a_problem` says whether a type the
/// table does not know is reported (where flow must write the interface
/// count itself) or let through (where AWS decides at apply).
pub fn type_problem(instance_type: &str, unknown_is_a_problem: bool) -> Option<(String, String)> {
    match lookup(instance_type) {
        Lookup::Efa(_) => None,
        Lookup::NoEfa => {
            let same = family_with_efa(instance_type);
            let help = if same.is_empty() {
                "choose an instance type with EFA (p4d.24xlarge, p5.48xlarge, …; \
                 providers/data/efa-instance-types.csv lists them), or turn EFA off"
                    .to_string()
            } else {
                format!("in this family only {same} have EFA: choose one of them, or turn EFA off")
            };
            Some((format!("instance type `{instance_type}` has no EFA"), help))
        }
        Lookup::Unknown if unknown_is_a_problem => Some((
            format!(
                "flow does not know whether instance type `{instance_type}` has EFA, nor how many interfaces"
            ),
            "use a type listed in providers/data/efa-instance-types.csv, or add a row for it \
             (EfaInfo.MaximumEfaInterfaces of `aws ec2 describe-instance-types`)"
                .to_string(),
        )),
        Lookup::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_type() {
        assert_eq!(lookup("p4d.24xlarge"), Lookup::Efa(4));
        assert_eq!(lookup("p4de.24xlarge"), Lookup::Efa(4));
        assert_eq!(lookup("p5.48xlarge"), Lookup::Efa(32));
        assert_eq!(lookup("p5.4xlarge"), Lookup::Efa(1));
        assert_eq!(lookup("p5en.48xlarge"), Lookup::Efa(16));
        assert_eq!(lookup("p6-b200.48xlarge"), Lookup::Efa(8));
        assert_eq!(lookup("g5.xlarge"), Lookup::NoEfa);
        assert_eq!(lookup("m5.large"), Lookup::Unknown);
        assert_eq!(interfaces("g5.xlarge"), None);
    }

    #[test]
    fn every_row_parses() {
        let data_rows = TABLE
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(rows().len(), data_rows);
        assert!(TABLE.contains("SOURCE."));
    }

    #[test]
    fn a_type_without_efa_names_its_family_members_with_efa() {
        let (msg, help) = type_problem("g5.2xlarge", false).unwrap();
        assert_eq!(msg, "instance type `g5.2xlarge` has no EFA");
        assert!(help.contains("g5.48xlarge (1)"), "{help}");
        assert!(type_problem("m5.large", false).is_none());
        assert!(type_problem("m5.large", true).is_some());
        assert!(type_problem("p5.48xlarge", true).is_none());
    }
}
