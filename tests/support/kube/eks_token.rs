//! A token webhook that authenticates EKS bearer tokens as EKS does: by
//! calling STS (moto's) with the presigned request the token carries.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Starts the EKS token webhook (see [`Options::eks_sts`]); returns its URL.
pub(super) fn eks_webhook(
    sts: std::net::SocketAddr,
    cluster: String,
    identities: Arc<Mutex<Vec<String>>>,
) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind webhook");
    let url = format!("http://{}/authenticate", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            // One thread per connection: the API server may hold one open
            // without a request, which must not stall the others.
            let (cluster, identities) = (cluster.clone(), identities.clone());
            std::thread::spawn(move || answer(s, sts, &cluster, &identities));
        }
    });
    url
}

/// Answers one TokenReview on `s`.
fn answer(
    mut s: std::net::TcpStream,
    sts: std::net::SocketAddr,
    cluster: &str,
    identities: &Mutex<Vec<String>>,
) {
    use std::io::{Read, Write};
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let body = loop {
        let n = s.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break None;
        }
        raw.extend_from_slice(&buf[..n]);
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if raw.len() >= end + 4 + len {
            break Some(raw[end + 4..end + 4 + len].to_vec());
        }
    };
    let Some(body) = body else { return };
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let status = match verify_eks_token(sts, cluster, token) {
        Ok(arn) => {
            identities.lock().unwrap().push(arn.clone());
            json!({"authenticated": true, "user": {"username": arn, "groups": ["system:masters"]}})
        }
        Err(e) => json!({"authenticated": false, "error": e}),
    };
    let answer =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status})
            .to_string();
    let _ = s.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}", answer.len())
                    .as_bytes(),
            );
}

/// What EKS's authenticator checks of a token, then the STS call it makes;
/// the caller's ARN.
fn verify_eks_token(
    sts: std::net::SocketAddr,
    cluster: &str,
    token: &str,
) -> Result<String, String> {
    use base64::Engine;
    let body = token
        .strip_prefix("k8s-aws-v1.")
        .ok_or("not an EKS token")?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|e| format!("not base64url: {e}"))?;
    let url = String::from_utf8(url).map_err(|_| "not UTF-8")?;
    let rest = url.strip_prefix("https://sts.").ok_or("not an STS URL")?;
    let (host, query) = rest.split_once("/?").ok_or("no query")?;
    if !host.ends_with(".amazonaws.com") {
        return Err(format!("unexpected host sts.{host}"));
    }
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
    };
    if param("Action") != Some("GetCallerIdentity") {
        return Err("not GetCallerIdentity".into());
    }
    if param("X-Amz-SignedHeaders").is_none_or(|h| !h.contains("x-k8s-aws-id")) {
        return Err("x-k8s-aws-id is not signed".into());
    }
    if param("X-Amz-Expires")
        .and_then(|e| e.parse::<u32>().ok())
        .is_none_or(|e| e > 900)
    {
        return Err("bad expiry".into());
    }
    param("X-Amz-Signature").ok_or("unsigned")?;
    let auth = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=0";
    let (status, xml) = super::super::moto::try_http(
        sts,
        "GET",
        &format!("/?{query}"),
        &[("x-k8s-aws-id", cluster), ("Authorization", auth)],
        b"",
    )
    .map_err(|e| format!("STS: {e}"))?;
    if status != 200 {
        return Err(format!("STS answered {status}: {xml}"));
    }
    super::super::moto::between_all(&xml, "<Arn>", "</Arn>")
        .into_iter()
        .next()
        .ok_or_else(|| format!("no Arn in {xml}"))
}
