//! The fetch against a real server on loopback: a std `TcpListener` in a
//! thread that answers by path with a fixed body, a body past the cap, a
//! body that never ends, a body that trickles, and redirects.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::*;

/// The fixed manifest the server serves at `/fixed.yaml`.
const FIXED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fixed}\ndata: {a: b}\n";

/// A server on 127.0.0.1 for the life of the test process; its base URL.
fn server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    base
}

/// One request: read its head, answer by path.
fn answer(mut s: TcpStream) {
    let mut path = String::new();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if path.is_empty() {
            path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        }
        if line == "\r\n" {
            break;
        }
        line.clear();
    }
    let head = |len: Option<usize>| match len {
        Some(n) => format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"),
        None => "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string(),
    };
    let _ = match path.as_str() {
        "/fixed.yaml" => s.write_all(format!("{}{FIXED}", head(Some(FIXED.len()))).as_bytes()),
        // Exactly one byte past the default cap, with its length said.
        "/big.yaml" => {
            let n = MAX_BYTES + 1;
            s.write_all(head(Some(n)).as_bytes())
                .and_then(|()| s.write_all(&vec![b'#'; n]))
        }
        // No length: a body that goes on until the client stops reading.
        "/endless.yaml" => s.write_all(head(None).as_bytes()).and_then(|()| {
            let chunk = vec![b'#'; 64 * 1024];
            loop {
                s.write_all(&chunk)?;
            }
        }),
        // A line, then nothing for longer than any test waits.
        "/slow.yaml" => s.write_all(head(Some(1000)).as_bytes()).and_then(|()| {
            s.write_all(b"a: 1\n")?;
            std::thread::sleep(Duration::from_secs(20));
            Ok(())
        }),
        "/moved.yaml" => s.write_all(
            b"HTTP/1.1 302 Found\r\nLocation: /fixed.yaml\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ),
        _ => s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    };
}

fn insecure() -> Rules {
    Rules {
        insecure: true,
        ..Rules::default()
    }
}

fn pinned(sha256: &str) -> Rules {
    Rules {
        sha256: Some(sha256.to_string()),
        insecure: true,
    }
}

#[tokio::test]
async fn plain_http_is_refused_without_insecure_before_any_connection() {
    // Nothing listens on port 9: the refusal comes before any connection.
    let e = get("http://127.0.0.1:9/x.yaml", &Rules::default())
        .await
        .unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.message
            .contains("`http://127.0.0.1:9/x.yaml` is plain http"),
        "{e}"
    );
    assert!(e.message.contains("insecure = true"), "{e}");
}

#[tokio::test]
async fn a_fixed_body_is_fetched_with_insecure_and_redirects_followed() {
    let base = server();
    assert_eq!(
        get(&format!("{base}/fixed.yaml"), &insecure())
            .await
            .unwrap(),
        FIXED
    );
    assert_eq!(
        get(&format!("{base}/moved.yaml"), &insecure())
            .await
            .unwrap(),
        FIXED
    );
}

#[tokio::test]
async fn the_pin_must_match_and_a_mismatch_names_both_digests() {
    let base = server();
    let url = format!("{base}/fixed.yaml");
    let right = hex::encode(Sha256::digest(FIXED.as_bytes()));
    assert_eq!(get(&url, &pinned(&right)).await.unwrap(), FIXED);
    assert_eq!(
        get(&url, &pinned(&right.to_uppercase())).await.unwrap(),
        FIXED
    );
    let wrong = "0".repeat(64);
    let e = get(&url, &pinned(&wrong)).await.unwrap_err();
    assert!(!e.is_retryable());
    assert_eq!(
        e.message,
        format!("{url} has sha256 {right}, but its entry pins sha256 {wrong}")
    );
}

#[tokio::test]
async fn a_body_past_the_cap_stops_the_fetch_and_says_the_cap() {
    let base = server();
    let e = get(&format!("{base}/big.yaml"), &insecure())
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("is larger than 10 MB (the cap on a fetched manifest)"),
        "{e}"
    );
    // A body without a length is stopped at the cap too, not read to its end.
    let small = Limits {
        max_bytes: 100_000,
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let e = get_within(&format!("{base}/endless.yaml"), &insecure(), small)
        .await
        .unwrap_err();
    assert!(e.message.contains("is larger than 100000 bytes"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_slow_body_is_stopped_at_the_time_limit_which_the_error_says() {
    let base = server();
    let quick = Limits {
        timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let e = get_within(&format!("{base}/slow.yaml"), &insecure(), quick)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        e.message
            .contains("took longer than 1s (the limit on a manifest fetch)"),
        "{e}"
    );
    assert_eq!(Limits::default().timeout, Duration::from_secs(30));
}

#[test]
fn redirects_resolve_against_the_base() {
    assert!(is_url("https://x/y.yaml"));
    assert!(!is_url("manifests/a.yaml"));
    assert_eq!(join("https://h/a/b.yaml", "https://o/c"), "https://o/c");
    assert_eq!(join("https://h/a/b.yaml", "/c.yaml"), "https://h/c.yaml");
    assert_eq!(join("https://h/a/b.yaml", "c.yaml"), "https://h/a/c.yaml");
    assert_eq!(join("https://h", "c.yaml"), "https://h/c.yaml");
}
