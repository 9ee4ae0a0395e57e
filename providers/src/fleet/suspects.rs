//! What a failed attempt's output says of its nodes, read without a
//! guess: an Xid line (`gpu-3: NVRM: Xid (PCI:0000:10:1c): 79, …`, the
//! host name before `NVRM:`, as the kernel log and `dmesg` forwarders print
//! it) or an NCCL warning naming a peer (`NCCL WARN … remote peer
//! gpu-3<45678>`, `… hostname gpu-3`) points at a node of the job; a name
//! that is not one of the job's nodes is ignored. And the newest entry of
//! a checkpoint folder, from `find -printf '%T@ %p\n'`.

/// A node an attempt's output points at, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pointed {
    /// The node's name, as the scheduler names it (Slurm, Kubernetes).
    pub node: String,
    /// The evidence: what the line says, shortened.
    pub why: String,
}

/// The longest line quoted as evidence.
const QUOTE_MAX: usize = 160;

/// `word` as one of `nodes`: itself, without a `<port>` suffix or
/// surrounding punctuation, or its short name (before the first dot).
fn node_named(word: &str, nodes: &[String]) -> Option<String> {
    let word = word.split('<').next().unwrap_or(word);
    let word = word.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    if word.is_empty() {
        return None;
    }
    let short = word.split('.').next().unwrap_or(word);
    nodes
        .iter()
        .find(|n| n.as_str() == word || n.as_str() == short)
        .cloned()
}

/// `line` trimmed and cut to [`QUOTE_MAX`] characters.
fn quote(line: &str) -> String {
    let line = line.trim();
    match line.char_indices().nth(QUOTE_MAX) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_string(),
    }
}

/// Adds `p` unless its node is named already.
fn push(out: &mut Vec<Pointed>, p: Pointed) {
    if !out.iter().any(|o| o.node == p.node) {
        out.push(p);
    }
}

/// The nodes the Xid lines of `text` name (the word before `NVRM:` that is
/// one of `nodes`, `kernel:` and timestamps passed over), each with its
/// Xid code.
pub(crate) fn xid(text: &str, nodes: &[String]) -> Vec<Pointed> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("NVRM: Xid") else {
            continue;
        };
        let Some(node) = line[..at]
            .split_whitespace()
            .rev()
            .find_map(|w| node_named(w, nodes))
        else {
            continue;
        };
        let after = &line[at + "NVRM: Xid".len()..];
        let code = after
            .split_once("): ")
            .map(|(_, rest)| rest.split(',').next().unwrap_or("").trim())
            .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()));
        let why = match code {
            Some(c) => format!("Xid {c} on {node}: {}", quote(&line[at..])),
            None => format!("an Xid on {node}: {}", quote(&line[at..])),
        };
        push(&mut out, Pointed { node, why });
    }
    out
}

/// One NCCL warning or error line: the rank that printed it (the first
/// word before `NCCL WARN`, `host:pid:tid`, "" when there is none), that
/// rank's node when its host is one of the job's, and the peers it names.
struct Warning {
    reporter: String,
    reporter_node: Option<String>,
    named: Vec<Pointed>,
}

/// The peers NCCL's warnings and errors in `text` name: a node of `nodes`
/// after `NCCL WARN` or `NCCL ERROR` (the host before it is the one that
/// reports, not the peer), less a peer NCCL's later lines show alive (see
/// [`heard_from`]).
pub(crate) fn nccl(text: &str, nodes: &[String]) -> Vec<Pointed> {
    let mut warnings = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("NCCL WARN").or_else(|| line.find("NCCL ERROR")) else {
            continue;
        };
        let rest = &line[at..];
        let reporter = line[..at].split_whitespace().next().unwrap_or_default();
        let named = rest
            .split_whitespace()
            .skip(2)
            .filter_map(|w| node_named(w, nodes))
            .map(|node| Pointed {
                why: format!("NCCL names peer {node}: {}", quote(rest)),
                node,
            })
            .collect();
        warnings.push(Warning {
            reporter: reporter.to_string(),
            reporter_node: node_named(reporter.split(':').next().unwrap_or_default(), nodes),
            named,
        });
    }
    let mut out = Vec::new();
    for p in warnings.iter().flat_map(|w| &w.named) {
        if !heard_from(&warnings, &p.node) {
            push(&mut out, p.clone());
        }
    }
    out
}

/// Whether NCCL's lines show the rank on `node` alive after the warnings
/// that named it: every rank that named it warned at least twice more
/// without naming it (it stopped waiting on it, and went on waiting on
/// another), and `node`'s own rank warned after the last line that named
/// it (it joined the collective, and waits on another itself). So a peer
/// that was only slower to join an all_reduce than the rank that named it
/// is not taken for the one a hang waits on; a peer named to the end, or
/// that says nothing after, still is.
fn heard_from(warnings: &[Warning], node: &str) -> bool {
    let naming: Vec<usize> = (0..warnings.len())
        .filter(|&i| warnings[i].named.iter().any(|p| p.node == node))
        .collect();
    let Some(&last) = naming.last() else {
        return false;
    };
    let spoke_after = warnings[last + 1..]
        .iter()
        .any(|w| w.reporter_node.as_deref() == Some(node));
    spoke_after
        && naming.iter().all(|&i| {
            let reporter = &warnings[i].reporter;
            let last_by = naming
                .iter()
                .rev()
                .find(|&&j| &warnings[j].reporter == reporter)
                .copied()
                .unwrap_or(i);
            warnings[last_by + 1..]
                .iter()
                .filter(|w| &w.reporter == reporter)
                .count()
                >= 2
        })
}

/// Every node `text` points at: Xid lines first, then NCCL's peers.
pub(crate) fn pointed(text: &str, nodes: &[String]) -> Vec<Pointed> {
    let mut out = xid(text, nodes);
    for p in nccl(text, nodes) {
        push(&mut out, p);
    }
    out
}

/// The newest entry of a listing `find DIR -mindepth 1 -maxdepth 1
/// -printf '%T@ %p\n'` printed (seconds since the epoch, a space, the
/// path): the latest modification time, the greater path on a tie (so
/// `step-10` after `step-9` written in the same second is not assured:
/// time decides first). `None` for an empty folder.
pub(crate) fn newest(listing: &str) -> Option<String> {
    listing
        .lines()
        .filter_map(|l| {
            let (t, path) = l.split_once(' ')?;
            let t: f64 = t.trim().parse().ok()?;
            (!path.is_empty()).then_some((t, path))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
        .map(|(_, p)| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        ["gpu-1", "gpu-2", "gpu-3"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn xid_lines_name_the_host_before_nvrm() {
        let text = "step 3 loss 1.2\n\
            gpu-2: NVRM: Xid (PCI:0000:10:1c): 79, pid=4242, name=python, GPU has fallen off the bus.\n\
            Nov 28 01:02:03 gpu-3 kernel: [ 812.1] NVRM: Xid (PCI:0000:a0:1c): 48, pid='<unknown>', An uncorrectable double bit error\n\
            [8_1] gpu-2.cluster.local: NVRM: Xid (PCI:0000:10:1c): 79, again\n\
            other-host: NVRM: Xid (PCI:0000:10:1c): 79, not a node of the job\n";
        let found = xid(text, &nodes());
        let names: Vec<&str> = found.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(names, ["gpu-2", "gpu-3"]);
        assert!(
            found[0]
                .why
                .starts_with("Xid 79 on gpu-2: NVRM: Xid (PCI:0000:10:1c): 79"),
            "{}",
            found[0].why
        );
        assert!(
            found[1].why.starts_with("Xid 48 on gpu-3"),
            "{}",
            found[1].why
        );
        assert!(xid("NVRM: Xid (PCI:0000:10:1c): 79, no host", &nodes()).is_empty());
    }

    #[test]
    fn nccl_warnings_name_the_peer_not_the_reporter() {
        let text = "gpu-1:1234:1240 [0] NCCL INFO Channel 00 : gpu-2\n\
            gpu-1:1234:1240 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.5<55123> with error 12, opcode 0, len 0, vendor err 129 (Recv) hostname gpu-3\n\
            gpu-2:99:99 [3] NCCL WARN Connection closed by remote peer gpu-1.cluster<45678>\n";
        let found = nccl(text, &nodes());
        let names: Vec<&str> = found.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(names, ["gpu-3", "gpu-1"]);
        assert!(
            found[0]
                .why
                .starts_with("NCCL names peer gpu-3: NCCL WARN NET/IB")
        );
        // The INFO line names gpu-2 but is not a warning.
        let all = pointed(
            &format!("gpu-3: NVRM: Xid (PCI:0000:a0:1c): 79, x\n{text}"),
            &nodes(),
        );
        let names: Vec<&str> = all.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(names, ["gpu-3", "gpu-1"]);
        assert!(all[0].why.starts_with("Xid 79"));
    }

    /// A rank's NCCL warning, in the form of the test fleet's stand-in
    /// all_reduce rank (tests/fixtures/slurm/restarts/all-reduce-rank).
    fn waits(reporter: &str, peer: &str, secs: u32) -> String {
        format!(
            "{reporter}:1:1 [0] NCCL WARN [Rank 0] AllReduce: no data from remote peer {peer}<45678> for {secs}s\n"
        )
    }

    #[test]
    fn a_peer_only_slower_to_join_is_not_named_with_the_one_a_hang_waits_on() {
        let four: Vec<String> = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // gpu-1 waits a moment on gpu-2 and gpu-3, which join and wait on
        // gpu-4 with it, to the end.
        let mut text = waits("gpu-1", "gpu-2", 0) + &waits("gpu-1", "gpu-3", 0);
        text += &waits("gpu-1", "gpu-4", 0);
        for secs in 1..4 {
            for reporter in ["gpu-1", "gpu-2", "gpu-3"] {
                text += &waits(reporter, "gpu-4", secs);
            }
        }
        let names =
            |text: &str| -> Vec<String> { nccl(text, &four).into_iter().map(|p| p.node).collect() };
        assert_eq!(names(&text), ["gpu-4"]);
        // Named to the end by a rank that warns on: still named.
        let both = format!("{text}{}", waits("gpu-1", "gpu-2", 4));
        assert_eq!(names(&both), ["gpu-2", "gpu-4"]);
        // Named, then never heard from (a rank that died, or a flaky NIC
        // the other way too): named.
        let once = waits("gpu-1", "gpu-2", 0) + &waits("gpu-1", "gpu-3", 0);
        assert_eq!(names(&once), ["gpu-2", "gpu-3"]);
        let flaky = waits("gpu-1", "gpu-2", 0)
            + &waits("gpu-2", "gpu-1", 0)
            + &waits("gpu-1", "gpu-2", 1)
            + &waits("gpu-2", "gpu-1", 1);
        assert_eq!(names(&flaky), ["gpu-2", "gpu-1"]);
        // Its rank spoke after, but the rank that named it warned once
        // more only: named.
        let short = waits("gpu-1", "gpu-2", 0) + &waits("gpu-2", "gpu-4", 0);
        let short = short + &waits("gpu-1", "gpu-4", 0);
        assert_eq!(names(&short), ["gpu-2", "gpu-4"]);
    }

    #[test]
    fn long_lines_are_cut_when_quoted() {
        let line = format!("gpu-1: NVRM: Xid (PCI:0000:10:1c): 79, {}", "x".repeat(400));
        let why = &xid(&line, &nodes())[0].why;
        assert!(why.ends_with('…') && why.chars().count() < 200, "{why}");
    }

    #[test]
    fn the_newest_checkpoint_is_the_latest_written() {
        let listing = "1732755600.1200000000 /ckpt/step-1\n\
            1732755660.5000000000 /ckpt/step-3\n\
            1732755630.0000000000 /ckpt/step-2\n\
            garbage\n";
        assert_eq!(newest(listing).as_deref(), Some("/ckpt/step-3"));
        // Time first: a later step-10 beside step-9.
        let tie = "5.0 /c/step-9\n6.0 /c/step-10\n";
        assert_eq!(newest(tie).as_deref(), Some("/c/step-10"));
        assert_eq!(
            newest("5.0 /c/a b\n5.0 /c/a c\n").as_deref(),
            Some("/c/a c")
        );
        assert_eq!(newest(""), None);
    }
}
