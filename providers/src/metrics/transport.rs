//! Which network NCCL carried the test over, read from the `NCCL INFO`
//! lines NCCL prints with `NCCL_DEBUG=INFO`: `efa` (aws-ofi-nccl's
//! libfabric plugin on EFA), `socket` (NCCL's fallback to TCP sockets, where
//! "Out of bounds values : 0 OK" still prints), or `ib`.
//!
//! The lines that say what NCCL chose win: `Using network X` (NCCL 2.x),
//! `Assigned NET plugin X to comm` (newer NCCL, which loads several network
//! plugins) and each channel's `via NET/X/…`. Only when none is printed do
//! the plugins' own lines decide (`NET/OFI Selected Provider is efa`,
//! `NET/Socket : Using [0]eth0…`). One rank on sockets makes the run
//! `socket`: the slowest link sets the pace.

/// The transport a line names, and whether the line says what NCCL chose
/// (rather than what a plugin found).
fn named(line: &str) -> Option<(&'static str, bool)> {
    let info = line.split_once("NCCL INFO")?.1.trim();
    let chosen = info
        .strip_prefix("Using network ")
        .or_else(|| {
            info.strip_prefix("Assigned NET plugin ")
                .and_then(|r| r.strip_suffix(" to comm"))
        })
        .or_else(|| info.split_once(" via NET/").map(|(_, r)| r));
    if let Some(name) = chosen {
        return kind(name).map(|k| (k, true));
    }
    let plugin = info.strip_prefix("NET/")?;
    if plugin.starts_with("OFI Selected Provider is efa")
        || plugin.starts_with("OFI Selected provider is efa")
    {
        Some(("efa", false))
    } else if plugin.starts_with("Socket : Using") {
        Some(("socket", false))
    } else {
        None
    }
}

/// The transport a network's name means.
fn kind(name: &str) -> Option<&'static str> {
    let name = name.trim();
    if name.starts_with("Socket") {
        Some("socket")
    } else if name.starts_with("AWS Libfabric") || name.starts_with("Libfabric") {
        Some("efa")
    } else if name.starts_with("IB") {
        Some("ib")
    } else {
        None
    }
}

/// The transport of the run and the line that shows it; `None` when the
/// output has no `NCCL INFO` network line (NCCL_DEBUG was not INFO).
pub(super) fn read<'a>(lines: &[&'a str]) -> Option<(&'static str, &'a str)> {
    let found: Vec<(&'static str, bool, &str)> = lines
        .iter()
        .filter_map(|l| named(l).map(|(k, chosen)| (k, chosen, *l)))
        .collect();
    let decided = if found.iter().any(|(_, chosen, _)| *chosen) {
        found
            .iter()
            .filter(|(_, chosen, _)| *chosen)
            .collect::<Vec<_>>()
    } else {
        found.iter().collect()
    };
    decided
        .iter()
        .find(|(k, _, _)| *k == "socket")
        .or_else(|| decided.first())
        .map(|(k, _, line)| (*k, *line))
}

#[cfg(test)]
mod tests {
    use super::super::{Program, sample};
    use super::*;

    #[test]
    fn a_published_efa_run_reads_as_efa() {
        let r = Program::NcclTests
            .read(&sample("nccl-tests-eks-efa-info.txt"))
            .unwrap();
        assert_eq!(r.values["transport"], "efa");
        assert_eq!(
            r.lines["transport"],
            "nccl-tests-efa-16-worker-0:25:25 [0] NCCL INFO Using network AWS Libfabric"
        );
    }

    #[test]
    fn a_socket_fallback_reads_as_socket_naming_its_line() {
        let r = Program::NcclTests
            .read(&sample("nccl-tests-eks-socket.txt"))
            .unwrap();
        assert_eq!(r.values["transport"], "socket");
        assert_eq!(
            r.lines["transport"],
            "nccl-tests-efa-16-worker-0:25:25 [0] NCCL INFO Using network Socket"
        );
    }

    /// NCCL 2.28.9 on an H100 with no EFA or IB (testdata/h100-2026-11-27):
    /// after `NET/IB : No device found.` it uses sockets.
    #[test]
    fn a_real_run_without_efa_reads_as_socket() {
        let r = Program::NcclTests
            .read(&sample("h100-2026-11-27/nccl-allreduce-info.txt"))
            .unwrap();
        assert_eq!(r.values["transport"], "socket");
        assert_eq!(
            r.lines["transport"],
            "vm:1037:1037 [0] NCCL INFO Assigned NET plugin Socket to comm"
        );
    }

    #[test]
    fn what_nccl_chose_wins_over_what_a_plugin_found() {
        // Newer NCCL loads the socket plugin too, then assigns libfabric.
        let lines = [
            "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
            "h:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
            "h:1:1 [0] NCCL INFO Assigned NET plugin Libfabric to comm",
        ];
        assert_eq!(read(&lines).map(|r| r.0), Some("efa"));
        // Without a choice printed, the plugin lines decide; sockets first.
        let found = [
            "x NCCL INFO NET/OFI Selected Provider is efa",
            "y NCCL INFO NET/Socket : Using [0]eth0",
        ];
        assert_eq!(read(&found), Some(("socket", found[1])));
        // One rank's channel over sockets is enough.
        let mixed = [
            "a NCCL INFO Using network AWS Libfabric",
            "b NCCL INFO Channel 00 : 1[101d0] -> 8[101c0] [send] via NET/Socket/0",
        ];
        assert_eq!(read(&mixed), Some(("socket", mixed[1])));
        assert_eq!(
            read(&["NCCL version 2.9.9+cuda11.2", "# Avg bus bandwidth : 1"]),
            None
        );
        assert_eq!(read(&["h NCCL WARN NET/Socket : no interface found"]), None);
    }
}
