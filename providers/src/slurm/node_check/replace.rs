//! The id of a `slurm.node_check` run under policy `replace`: the drained
//! nodes, then each replacement as [`Replacing::encoded`] writes it
//! (`c1,c2|c1=i-…@worker-group-1@1764300000+@nvidia-smi lists 7 GPUs`), so
//! that a resume (kill -9 of flow anywhere) carries the replacements to
//! the end without asking the platform twice
//! ([`crate::slurm::replacement`]).

use crate::slurm::replacement::Replacing;

/// The step's id: the drained nodes, then each replacement.
pub(super) fn encode(held: &[String], replacing: &[Replacing]) -> String {
    let mut id = held.join(",");
    for r in replacing {
        id.push('|');
        id.push_str(&r.encoded());
    }
    id
}

/// The drained nodes and replacements of an id [`encode`] made (an id of
/// drained nodes alone, as earlier runs recorded it, has none).
pub(super) fn decode(id: &str) -> (Vec<String>, Vec<Replacing>) {
    let mut parts = id.split('|');
    let held = parts
        .next()
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let replacing = parts.filter_map(Replacing::decoded).collect();
    (held, replacing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_the_drained_nodes_and_each_replacement() {
        let r = Replacing {
            node: "ip-10-1-0-5".into(),
            instance_id: "i-0123456789abcdef0".into(),
            group: "worker-group-1".into(),
            since: 1_764_300_000,
            sent: false,
            reason: "nvidia-smi lists 7 GPUs, not 8 (a|b=c@d+e,f 100%)".into(),
            by: None,
        };
        let held = vec!["ip-10-1-0-5".to_string(), "ip-10-1-0-7".to_string()];
        let id = encode(&held, std::slice::from_ref(&r));
        assert_eq!(
            id,
            "ip-10-1-0-5,ip-10-1-0-7|ip-10-1-0-5=i-0123456789abcdef0@worker-group-1@1764300000\
             @nvidia-smi lists 7 GPUs%2C not 8 (a%7Cb%3Dc%40d%2Be%2Cf 100%25)"
        );
        assert_eq!(decode(&id), (held.clone(), vec![r.clone()]));
        let sent = Replacing { sent: true, ..r };
        let id = encode(&held, std::slice::from_ref(&sent));
        assert!(id.contains("@1764300000+@nvidia-smi"), "{id}");
        assert_eq!(decode(&id).1, vec![sent]);
        assert_eq!(decode("c1,c2"), (vec!["c1".into(), "c2".into()], vec![]));
    }
}
