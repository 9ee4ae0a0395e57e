//! The Kubernetes part of the local cloud for `bench/time-to-training.py`:
//! a real kube-apiserver that the local cloud's EKS describes as a
//! cluster's API server, with the test driver playing the controllers and
//! kubelets at the pace of the latency model (bench/latency.toml), around
//! one command.
//!
//!     local_eks --cluster NAME [--cluster NAME2] [--latency bench/latency.toml] -- CMD ARGS...
//!
//! Run it inside `scripts/local-aws` (it reads `AWS_ENDPOINT_URL`); it
//! registers the API server for each cluster name, so flow reaches it
//! through DescribeCluster and an EKS token as on AWS, runs CMD, stops the
//! servers and exits with CMD's status. With `--latency`, a rollout takes
//! the table's `kube.manifest` length and a job its `kube.job` length, each
//! divided by the table's `scale` (`FLOW_LATENCY_SCALE` overrides it).
//!
//! It is a bench target so that it shares the end-to-end tests' harness
//! (tests/support/kube) and builds in the debug profile with them:
//! `cargo build -p flow --bench local_eks`.

// The harness's unit tests are compiled out here (no test harness), which
// leaves their imports unused.
#[allow(unused_imports)]
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::Duration;

use support::kube::pace::Pace;
use support::kube::{KubeServer, Options};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args
        .iter()
        .position(|a| a == "--")
        .unwrap_or_else(|| usage("no `--` before the command"));
    let (own, command) = (&args[..split], &args[split + 1..]);
    if command.is_empty() {
        usage("no command after `--`");
    }
    let mut clusters = Vec::new();
    let mut latency = None;
    let mut it = own.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cluster" => clusters.push(
                it.next()
                    .cloned()
                    .unwrap_or_else(|| usage("--cluster NAME")),
            ),
            "--latency" => {
                latency = Some(
                    it.next()
                        .cloned()
                        .unwrap_or_else(|| usage("--latency FILE")),
                )
            }
            // `cargo bench` passes this to every bench target.
            "--bench" => {}
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .unwrap_or_else(|_| usage("AWS_ENDPOINT_URL is not set: run inside scripts/local-aws"));
    let moto: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|_| {
            usage(&format!(
                "AWS_ENDPOINT_URL {endpoint} is not http://HOST:PORT"
            ))
        });
    let first = clusters
        .first()
        .cloned()
        .unwrap_or_else(|| usage("at least one --cluster NAME"));
    let k = KubeServer::start_with(Options {
        eks_sts: Some(moto),
        eks_cluster: first,
    });
    for c in &clusters {
        k.describe_in_eks(c);
    }
    if let Some(path) = latency {
        let pace = pace_of(&path);
        eprintln!(
            "local_eks: rollouts take {:?}, jobs {:?}",
            pace.rollout, pace.job
        );
        k.driver().pace(pace);
    }
    let status = Command::new(&command[0])
        .args(&command[1..])
        .status()
        .unwrap_or_else(|e| usage(&format!("{}: {e}", command[0])));
    drop(k);
    std::process::exit(status.code().unwrap_or(1));
}

/// The table's `kube.manifest` and `kube.job` lengths divided by its scale.
fn pace_of(path: &str) -> Pace {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let table: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let scale = std::env::var("FLOW_LATENCY_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .or_else(|| {
            table
                .get("scale")
                .and_then(|s| s.as_float().or(s.as_integer().map(|i| i as f64)))
        })
        .unwrap_or(60.0);
    let seconds = |key: &str| {
        let real = table
            .get("steps")
            .and_then(|s| s.get(key))
            .and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)))
            .unwrap_or_else(|| usage(&format!("{path}: no [steps] \"{key}\"")));
        Duration::from_secs_f64(real / scale)
    };
    Pace {
        rollout: seconds("kube.manifest"),
        job: seconds("kube.job"),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("local_eks: {why}\nusage: local_eks --cluster NAME [--latency TABLE] -- CMD ARGS...");
    std::process::exit(2);
}
