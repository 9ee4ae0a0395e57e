//! How far group commit goes: puts/s and flushes/s with 1, 10 and 200
//! concurrent writers, each waiting for its put to be on disk before the next.
//!
//! Run by hand (not a test):
//!
//!     cargo run -p flow-state --release --example commit_throughput [DIR] [SECONDS]
//!
//! DIR (default: a temporary directory under $TMPDIR) should be on the disk
//! you care about: the figures are the disk's fsync rate, multiplied.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use flow_state::{StepRecord, Store};
use serde_json::json;

fn record(name: &str, n: u64) -> StepRecord {
    // About the size of a real record: a few inputs and outputs.
    let mut rec = StepRecord::new(name, "cloudformation.stack", 1_700_000_000 + n);
    rec.inputs
        .insert("stack_name".into(), json!(format!("{name}-stack")));
    rec.inputs
        .insert("template".into(), json!("templates/vpc.yaml"));
    rec.inputs.insert(
        "parameters".into(),
        json!({"Cidr": "10.0.0.0/16", "Azs": 3}),
    );
    rec.outputs
        .insert("VpcId".into(), json!(format!("vpc-{n:016x}")));
    rec.outputs.insert(
        "PrivateSubnets".into(),
        json!(["subnet-1", "subnet-2", "subnet-3"]),
    );
    rec.attempts = 1;
    rec
}

async fn run(dir: &std::path::Path, writers: usize, seconds: u64) {
    let root = dir.join(format!("state-{writers}"));
    let store = Store::open(&root, "commit_throughput").expect("open state");
    let start_serial = store.serial();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let committer = store.committer();
            tokio::spawn(async move {
                let (mut puts, mut waited) = (0u64, Duration::ZERO);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    committer
                        .put(record(&format!("step-{w:03}"), puts))
                        .await
                        .expect("put");
                    waited += t.elapsed();
                    puts += 1;
                }
                (puts, waited)
            })
        })
        .collect();
    let (mut puts, mut waited) = (0u64, Duration::ZERO);
    for task in tasks {
        let (p, w) = task.await.expect("writer task");
        puts += p;
        waited += w;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let flushes = store.serial() - start_serial;
    println!(
        "{writers:>4} writers: {:>9.0} puts/s  {:>7.0} flushes/s  {:>6.1} puts/flush  {:>7.2} ms/put",
        puts as f64 / elapsed,
        flushes as f64 / elapsed,
        puts as f64 / flushes.max(1) as f64,
        waited.as_secs_f64() * 1000.0 / puts.max(1) as f64,
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let tmp;
    let dir: PathBuf = match args.next() {
        Some(dir) => dir.into(),
        None => {
            tmp = tempfile::tempdir().expect("temporary directory");
            tmp.path().to_path_buf()
        }
    };
    let seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    println!(
        "state under {} ({seconds} s per run; one flush = sled flush + fdatasync)",
        dir.display()
    );
    for writers in [1, 10, 200] {
        run(&dir, writers, seconds).await;
    }
}
