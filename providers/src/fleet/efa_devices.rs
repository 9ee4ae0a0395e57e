//! How many EFA devices a node's libfabric sees: `fi_info -p efa -t
//! FI_EP_RDM` prints one record per EFA device (`provider: efa`, `fabric:
//! …`, `domain: efa_0-rdm`, …); newer libfabric prints two per device (the
//! `efa` and `efa-direct` fabrics, the same domain). The devices are the
//! distinct domains of the `efa` records. The check of `check.efa`, against
//! the instance type's EFA interfaces (providers/data/efa-instance-types.csv).

use std::collections::BTreeSet;

/// What `fi_info` says of a node's EFA devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The distinct EFA domains it lists.
    pub count: u32,
    /// The line that says so: the last device's `domain:` line, or what
    /// fi_info printed when it found no EFA provider.
    pub line: String,
}

/// The EFA devices `fi_info` lists in `text`; `None` when `text` holds no
/// fi_info output at all (neither a record nor its "no provider" answer).
pub fn listed(text: &str) -> Option<Listed> {
    let mut domains = BTreeSet::new();
    let mut line = String::new();
    let mut provider = "";
    let mut records = 0;
    for raw in text.lines() {
        let l = raw.trim();
        if let Some(p) = l.strip_prefix("provider:") {
            provider = p.trim();
            records += 1;
        } else if let Some(d) = l.strip_prefix("domain:")
            && provider == "efa"
        {
            domains.insert(d.trim().to_string());
            line = l.to_string();
        }
    }
    if records == 0 {
        // libfabric's answer when no provider matches: `fi_getinfo: -61
        // (No data available)`.
        let none = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("fi_getinfo:"))?;
        return Some(Listed {
            count: 0,
            line: none.to_string(),
        });
    }
    Some(Listed {
        count: domains.len() as u32,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P4D: &str = include_str!("testdata/fi_info-efa-p4d.txt");

    #[test]
    fn the_published_output_lists_four_devices() {
        assert_eq!(
            listed(P4D),
            Some(Listed {
                count: 4,
                line: "domain: efa_3-rdm".into()
            })
        );
    }

    #[test]
    fn a_device_listed_by_two_fabrics_counts_once_and_a_missing_one_shows() {
        let both = P4D.replace("fabric: EFA-fe80", "fabric: efa-direct\nfabric: EFA-fe80");
        let doubled = format!(
            "{P4D}{}",
            P4D.replace("fabric: EFA", "fabric: efa-direct EFA")
        );
        assert_eq!(listed(&both).unwrap().count, 4);
        assert_eq!(listed(&doubled).unwrap().count, 4);
        let three: String = P4D.lines().take(18).map(|l| format!("{l}\n")).collect();
        assert_eq!(listed(&three).unwrap().count, 3);
        let none = listed("fi_getinfo: -61 (No data available)\n").unwrap();
        assert_eq!(
            (none.count, none.line.as_str()),
            (0, "fi_getinfo: -61 (No data available)")
        );
        assert_eq!(listed("bash: fi_info: command not found\n"), None);
    }
}
