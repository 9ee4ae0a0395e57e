//! The fault proxy's HTTP/1.1 plumbing: a request read whole from the
//! client, an answer re-framed for it, and a connection closed by a reset.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::Protocol;

/// One request as read from the client.
pub(super) struct Request {
    pub(super) head: String,
    pub(super) body: Vec<u8>,
}

impl Request {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    pub(super) fn method_and_path(&self) -> (&str, &str) {
        let mut parts = self.head.split_whitespace();
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }

    /// The AWS operation, as far as the proxy can tell.
    pub(super) fn operation(&self) -> String {
        if let Some(target) = self.header("x-amz-target") {
            return target.rsplit('.').next().unwrap_or(target).to_string();
        }
        let body = String::from_utf8_lossy(&self.body);
        if let Some(action) = body.split('&').find_map(|p| p.strip_prefix("Action=")) {
            return action.to_string();
        }
        let (method, path) = self.method_and_path();
        if let Some(op) = path.strip_prefix("/v1/") {
            return format!("batch:{}", op.split('?').next().unwrap_or(op));
        }
        if path.starts_with("/clusters") {
            return format!("eks:{method} {}", path.split('?').next().unwrap_or(path));
        }
        format!("s3:{method} {path}")
    }

    pub(super) fn protocol(&self) -> Protocol {
        if self.header("x-amz-target").is_some() {
            Protocol::Json
        } else if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"))
        {
            // EC2's query API answers errors in its own shape.
            if String::from_utf8_lossy(&self.body).contains("Version=2016-11-15") {
                Protocol::Ec2
            } else {
                Protocol::Query
            }
        } else if self.method_and_path().1.starts_with("/v1/") {
            Protocol::RestJson
        } else {
            Protocol::RestXml
        }
    }
}

/// Reads one request (head and body) from the client; `None` at the end.
pub(super) async fn read_request(
    reader: &mut BufReader<OwnedReadHalf>,
) -> std::io::Result<Option<Request>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            if head.is_empty() {
                continue;
            }
            break;
        }
        head.push_str(&line);
    }
    let mut req = Request {
        head,
        body: Vec::new(),
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        // Forward the chunked body as it came.
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line).await?;
            req.body.extend_from_slice(size_line.as_bytes());
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if size == 0 {
                loop {
                    let mut trailer = String::new();
                    reader.read_line(&mut trailer).await?;
                    req.body.extend_from_slice(trailer.as_bytes());
                    if trailer == "\r\n" || trailer.is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            req.body.extend_from_slice(&chunk);
        }
    } else if let Some(len) = req
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        let mut body = vec![0; len];
        reader.read_exact(&mut body).await?;
        req.body = body;
    }
    Ok(Some(req))
}

/// Closes the client's connection with a reset: no answer, ever.
pub(super) fn reset(
    reader: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
) -> std::io::Result<()> {
    let stream = reader
        .into_inner()
        .reunite(write)
        .map_err(std::io::Error::other)?;
    // A zero linger makes the close a reset, and never blocks.
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO))?;
    drop(stream);
    Ok(())
}

/// An answer with head lines `head` (framing headers replaced) and `body`.
pub(super) fn respond(head: &str, body: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&str> = head
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            !l.starts_with("content-length:")
                && !l.starts_with("transfer-encoding:")
                && !l.starts_with("connection:")
        })
        .collect();
    let length = format!("Content-Length: {}", body.len());
    lines.push(&length);
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

/// Waits `delay` with the client's connection open; `false` as soon as the
/// client has gone away (closed or reset: `flow` was killed, say).
pub(super) async fn client_stays(reader: &mut BufReader<OwnedReadHalf>, delay: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + delay;
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => true,
        read = reader.fill_buf() => match read {
            // More bytes (never sent while a request waits): not a close.
            Ok(bytes) if !bytes.is_empty() => {
                tokio::time::sleep_until(deadline).await;
                true
            }
            _ => false,
        },
    }
}
