//! Seeds a local state's run history with N runs shaped like an NCCL test's
//! (its values, a 32-size table, two gate verdicts), for `bench/runs.py`.
//!
//! Usage: seed_runs STATE_DIR N

use flow_state::{GateVerdict, RunOutcome, RunRecord, Store};
use serde_json::{Map, Value, json};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: seed_runs STATE_DIR N");
        std::process::exit(2);
    };
    let store = Store::open(std::path::Path::new(&dir), "seed_runs").expect("open the state");
    let log = store.run_log();
    let start_ms: u64 = 1_764_000_000_000;
    for i in 0..n {
        let step = ["nccl", "train", "nvidia_smi"][(i % 3) as usize];
        let busbw = 150.0 + (i % 97) as f64;
        let mut sizes = Map::new();
        for p in 3..35u32 {
            let bw = busbw * (p as f64 / 34.0);
            sizes.insert(
                (1u64 << p).to_string(),
                json!({"out_of_place": {"time_us": 10.0 * p as f64, "algbw": bw / 1.9, "busbw": bw, "wrong": 0},
                       "in_place": {"time_us": 10.0 * p as f64, "algbw": bw / 1.9, "busbw": bw, "wrong": 0}}),
            );
        }
        let values: Map<String, Value> = json!({
            "busbw": busbw, "busbw_peak": busbw * 2.6, "algbw_peak": busbw * 1.4,
            "out_of_bounds": 0, "sizes": sizes
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let at = start_ms + i * 60_000;
        let run = RunRecord {
            id: flow_state::runs::run_id(at, step),
            started: flow_state::timefmt::format_rfc3339(at / 1000),
            duration_ms: 60_000 + i % 5_000,
            workflow: "bench-runs".into(),
            step: step.into(),
            provider: "kube.job".into(),
            inputs_digest: format!("{i:064x}"),
            input_digests: Default::default(),
            outcome: if i % 10 == 0 {
                RunOutcome::Failed
            } else {
                RunOutcome::Succeeded
            },
            error: (i % 10 == 0).then(|| "expect: busbw = 150 is not >= 300".to_string()),
            values,
            verdicts: vec![
                GateVerdict {
                    name: "busbw".into(),
                    gate: ">= 160".into(),
                    passed: i % 10 != 0,
                    why: None,
                },
                GateVerdict {
                    name: "out_of_bounds".into(),
                    gate: "== 0".into(),
                    passed: true,
                    why: None,
                },
            ],
            log: format!("{dir}/logs/{step}.log"),
        };
        log.append(&run).expect("append a run");
    }
}
