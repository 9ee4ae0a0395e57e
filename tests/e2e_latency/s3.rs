//! The latency model's S3 (scripts/local-cloud/latency_s3.py): each S3 call
//! the state backend makes answers no sooner than bench/latency.toml's
//! `[s3]` first-byte latency plus its bodies at the table's per-connection
//! throughput, and the bytes each call sent are counted.

use std::time::{Duration, Instant};

use crate::support::moto::{Moto, authorization};
use crate::support::workspace_root;

/// The `[s3]` rows of bench/latency.toml: first byte (s), throughput (B/s).
fn table() -> (f64, f64) {
    let text = std::fs::read_to_string(workspace_root().join("bench/latency.toml")).unwrap();
    let doc: toml::Table = text.parse().expect("bench/latency.toml is TOML");
    let s3 = doc["s3"].as_table().expect("[s3]");
    (
        s3["first_byte"].as_float().expect("first_byte"),
        s3["throughput"].as_float().expect("throughput"),
    )
}

/// Times one S3 call; answers its status, answer and wall time.
fn timed(moto: &Moto, method: &str, path: &str, body: &[u8]) -> (u16, String, Duration) {
    let auth = authorization("s3");
    let started = Instant::now();
    let (status, text) = moto.http(method, path, &[("Authorization", &auth)], body);
    (status, text, started.elapsed())
}

#[test]
fn s3_calls_take_the_tables_first_byte_and_transfer_time() {
    let (first_byte, throughput) = table();
    let table_path = workspace_root().join("bench/latency.toml");
    let moto = Moto::start_with(&[
        ("FLOW_LATENCY_MODEL", &table_path.to_string_lossy()),
        ("FLOW_LATENCY_S3", "1"),
    ]);
    let at_least = |bytes: usize| Duration::from_secs_f64(first_byte + bytes as f64 / throughput);
    // moto's own time on a loaded 2-core machine: generous, but far below
    // what a model holding nothing or the whole table twice would show.
    let slack = Duration::from_millis(900);
    let check = |what: &str, took: Duration, bytes: usize| {
        let floor = at_least(bytes);
        assert!(
            took >= floor && took < floor + slack,
            "{what} took {took:?}; the table says {floor:?} (+ at most {slack:?} of moto's own)"
        );
    };

    let (status, body, took) = timed(&moto, "PUT", "/lat", b"");
    assert_eq!(status, 200, "{body}");
    check("CreateBucket", took, 0);

    let small = vec![b'x'; 1_000];
    let (status, body, took) = timed(&moto, "PUT", "/lat/small.json", &small);
    assert_eq!(status, 200, "{body}");
    check("PutObject of 1 kB", took, small.len());

    // 17 MB: 0.2 s at 85 MB/s on top of the first byte, each way.
    let large = vec![b'y'; 17_000_000];
    let (status, body, took) = timed(&moto, "PUT", "/lat/large.json", &large);
    assert_eq!(status, 200, "{body}");
    check("PutObject of 17 MB", took, large.len());
    let (status, body, took) = timed(&moto, "GET", "/lat/large.json", b"");
    assert_eq!((status, body.len()), (200, large.len()));
    check("GetObject of 17 MB", took, large.len());

    let (status, _, took) = timed(&moto, "GET", "/lat/small.json", b"");
    assert_eq!(status, 200);
    check("GetObject of 1 kB", took, small.len());
    let (status, listing, took) = timed(&moto, "GET", "/lat?list-type=2&prefix=s", b"");
    assert!(status == 200 && listing.contains("small.json"), "{listing}");
    check("ListObjectsV2", took, listing.len());
    let (status, _, took) = timed(&moto, "DELETE", "/lat/small.json", b"");
    assert_eq!(status, 204);
    check("DeleteObject", took, 0);

    let report = moto.latency_report();
    assert_eq!(
        report["bytes_in"]["s3:PUT /lat/large.json"], 17_000_000,
        "{}",
        report["bytes_in"]
    );
    assert_eq!(report["bytes_in"]["s3:PUT /lat/small.json"], 1_000);
}
