//! The test API server's EKS token webhook: it authenticates a bearer token
//! as EKS's aws-iam-authenticator and STS together do, with no call out.
//!
//! aws-iam-authenticator (`pkg/token/token.go`, `Verify`) takes a token
//! `k8s-aws-v1.` + base64url (unpadded) of a presigned STS URL, at most
//! 4 KiB; checks the URL (https, an STS host, path `/`, only its known
//! query parameters, each once, `Action=GetCallerIdentity`, `x-k8s-aws-id`
//! among the signed headers, `X-Amz-Expires` within 0–900 s, an
//! `X-Amz-Date` less than 15 minutes old: the URL is good 15 minutes after
//! signing whatever `X-Amz-Expires` says), then sends the request to STS
//! with the header `x-k8s-aws-id` set to *its own* cluster's name. STS
//! recomputes the SigV4 signature with the secret key of the access key in
//! `X-Amz-Credential`, so a token signed for another cluster, with another
//! secret, or altered in any signed byte fails there, and answers the
//! caller's ARN, which the authenticator maps to a Kubernetes user (an
//! access entry or `aws-auth` mapping); an ARN with none is refused.
//!
//! Here the STS half is [`verify`]: the signature is recomputed by hand
//! (SHA-256 and HMAC, [`hmac_sha256`]) with the secret of [`CREDENTIALS`],
//! the test's only IAM user (the access key moto's environment gives flow),
//! and its ARN is mapped through [`MAPPINGS`] to the user `flow-e2e-admin`
//! in the group `flow-e2e:admins`, which the harness binds to
//! `cluster-admin` (the API server authorizes with RBAC: nobody gets
//! `system:masters` through an EKS token).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The prefix of every EKS token.
const PREFIX: &str = "k8s-aws-v1.";
/// The authenticator's limit on a token's length.
const MAX_TOKEN_BYTES: usize = 4096;
/// How long a presigned URL is good after its `X-Amz-Date`.
const LIFE: Duration = Duration::from_secs(15 * 60);
/// How far in the future STS accepts a request's date.
const SKEW: Duration = Duration::from_secs(5 * 60);
/// The query parameters the authenticator allows (lowercase).
const ALLOWED: [&str; 9] = [
    "action",
    "version",
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-security-token",
    "x-amz-signature",
    "x-amz-signedheaders",
];

/// An IAM identity the test's STS knows.
#[derive(Debug, Clone, Copy)]
pub struct Credential {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key: &'static str,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_key: &'static str,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub session_token: Option<&'static str>,
    /// What STS's GetCallerIdentity answers as `Arn`.
    pub arn: &'static str,
}

/// The credentials STS knows: those of the moto environment flow runs
/// with, and a user the cluster has no mapping for.
pub const CREDENTIALS: &[Credential] = &[
    Credential {
        access_key: "testing",
        secret_key: "testing",
        session_token: Some("testing"),
        arn: "arn:aws:iam::123456789012:user/flow-e2e",
    },
    Credential {
        access_key: "AKIAUNMAPPEDEXAMPLE",
        secret_key: "unmapped-secret",
        session_token: None,
        arn: "arn:aws:iam::123456789012:user/no-access-entry",
    },
];

/// A cluster's mapping of an IAM ARN to a Kubernetes user (an access
/// entry, or a `mapUsers` item of `aws-auth`).
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    /// The IAM ARN.
    pub arn: &'static str,
    /// The Kubernetes user name.
    pub username: &'static str,
    /// Its groups.
    pub groups: &'static [&'static str],
}

/// The group the harness binds to `cluster-admin`.
pub const ADMIN_GROUP: &str = "flow-e2e:admins";

/// The test cluster's mappings.
pub const MAPPINGS: &[Mapping] = &[Mapping {
    arn: "arn:aws:iam::123456789012:user/flow-e2e",
    username: "flow-e2e-admin",
    groups: &[ADMIN_GROUP],
}];

/// Who a token authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The caller's IAM ARN.
    pub arn: String,
    /// The access key that signed.
    pub access_key: String,
    /// The Kubernetes user it maps to.
    pub username: String,
    /// Its groups.
    pub groups: Vec<String>,
}

/// The webhook's state, shared with the test.
#[derive(Debug, Default)]
pub struct Webhook {
    /// The authenticator's cluster id (sent as `x-k8s-aws-id`).
    pub cluster: String,
    /// The ARNs let in, in order.
    pub identities: Mutex<Vec<String>>,
    /// Why tokens were refused, in order.
    pub refusals: Mutex<Vec<String>>,
    /// How far ahead of the real clock tokens are judged.
    pub later: Mutex<Duration>,
    /// Whether each token has one bit flipped before it is judged (as if
    /// altered on its way: see [`flip_a_bit`]).
    pub alter: AtomicBool,
}

/// Starts the EKS token webhook; returns its URL.
pub(super) fn eks_webhook(state: Arc<Webhook>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind webhook");
    let url = format!("http://{}/authenticate", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            // One thread per connection: the API server may hold one open
            // without a request, which must not stall the others.
            let state = state.clone();
            std::thread::spawn(move || answer(s, &state));
        }
    });
    url
}

/// Answers one TokenReview on `s`.
fn answer(mut s: std::net::TcpStream, state: &Webhook) {
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
    let mut token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if state.alter.load(Ordering::SeqCst) {
        token = flip_a_bit(&token);
    }
    let now = SystemTime::now() + *state.later.lock().unwrap();
    let status = match verify(&token, &state.cluster, now) {
        Ok(who) => {
            state.identities.lock().unwrap().push(who.arn.clone());
            let account = who.arn.split(':').nth(4).unwrap_or_default();
            json!({"authenticated": true, "user": {
                "username": who.username,
                "uid": format!("aws-iam-authenticator:{account}:{}", who.access_key),
                "groups": who.groups,
                "extra": {"arn": [who.arn], "accessKeyId": [who.access_key]},
            }})
        }
        Err(e) => {
            state.refusals.lock().unwrap().push(e.clone());
            json!({"authenticated": false, "error": e})
        }
    };
    let answer =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status})
            .to_string();
    let _ = s.write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}", answer.len())
                    .as_bytes(),
            );
}

/// `token` with one bit of its presigned URL flipped: the lowest of the
/// last digit of `X-Amz-Date` (the token signed a second earlier or later),
/// an alteration every check but the signature's lets through. A token
/// that is not an EKS token is returned as it is.
pub fn flip_a_bit(token: &str) -> String {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let Some(mut url) = token
        .strip_prefix(PREFIX)
        .and_then(|b| URL_SAFE_NO_PAD.decode(b).ok())
    else {
        return token.to_string();
    };
    let at = String::from_utf8_lossy(&url)
        .find("X-Amz-Date=")
        .map(|i| i + "X-Amz-Date=".len() + "YYYYMMDDTHHMMS".len());
    if let Some(at) = at.filter(|&at| at < url.len()) {
        url[at] ^= 1;
    }
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(url))
}

/// Authenticates `token` for the cluster `cluster` at time `now`, as
/// aws-iam-authenticator and STS do; the refusal names what failed, with
/// STS's error code where STS would be the one to refuse.
pub fn verify(token: &str, cluster: &str, now: SystemTime) -> Result<Identity, String> {
    use base64::Engine;
    if token.len() > MAX_TOKEN_BYTES {
        return Err("token is too large".into());
    }
    let body = token
        .strip_prefix(PREFIX)
        .ok_or(format!("token is missing expected {PREFIX:?} prefix"))?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|e| format!("token is not base64url: {e}"))?;
    let url = String::from_utf8(url).map_err(|_| "pre-signed URL is not UTF-8")?;
    let rest = url
        .strip_prefix("https://")
        .ok_or("unexpected scheme in pre-signed URL")?;
    let (host, path_query) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let query = path_query
        .strip_prefix("/?")
        .ok_or("unexpected path in pre-signed URL")?;
    if query.contains('#') {
        return Err("unexpected fragment in pre-signed URL".into());
    }
    let host_region =
        sts_region(host).ok_or(format!("unexpected hostname {host:?} in pre-signed URL"))?;

    let mut params: Vec<(String, String)> = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        if !ALLOWED.contains(&k.to_ascii_lowercase().as_str()) {
            return Err(format!("non-whitelisted query parameter {k:?}"));
        }
        if params.iter().any(|(p, _)| p.eq_ignore_ascii_case(&k)) {
            return Err("query parameter with multiple values not supported".into());
        }
        params.push((k, v));
    }
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if get("action") != Some("GetCallerIdentity") {
        return Err("unexpected action parameter in pre-signed URL".into());
    }
    let signed: Vec<&str> = get("x-amz-signedheaders")
        .unwrap_or("")
        .split(';')
        .collect();
    if !signed.contains(&"x-k8s-aws-id") {
        return Err("client did not sign the x-k8s-aws-id header in the pre-signed URL".into());
    }
    let expires = get("x-amz-expires").and_then(|e| e.parse::<i64>().ok());
    if !expires.is_some_and(|e| (0..=900).contains(&e)) {
        return Err(format!(
            "invalid X-Amz-Expires parameter in pre-signed URL: {expires:?}"
        ));
    }
    let date = get("x-amz-date").ok_or("X-Amz-Date parameter must be present in pre-signed URL")?;
    let signed_at =
        parse_amz_date(date).ok_or(format!("error parsing X-Amz-Date parameter {date}"))?;
    if now > signed_at + LIFE {
        return Err(format!(
            "X-Amz-Date parameter is expired (15 minute expiration) {date}"
        ));
    }

    // What STS checks: its parameter names are case-sensitive.
    let sts = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    for name in [
        "Action",
        "Version",
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ] {
        if sts(name).is_none() {
            return Err(format!("STS: IncompleteSignature: no {name} parameter"));
        }
    }
    if sts("Version") != Some("2011-06-15") || sts("X-Amz-Algorithm") != Some("AWS4-HMAC-SHA256") {
        return Err(
            "STS: InvalidAction: not a SigV4 GetCallerIdentity of version 2011-06-15".into(),
        );
    }
    if signed_at > now + SKEW {
        return Err(format!(
            "STS: SignatureDoesNotMatch: Signature not yet current: {date}"
        ));
    }
    let credential = sts("X-Amz-Credential").unwrap_or("");
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, day, region, "sts", "aws4_request"] = scope[..] else {
        return Err(format!(
            "STS: IncompleteSignature: bad credential scope {credential:?}"
        ));
    };
    if day != &date[..8] || region != host_region {
        return Err(format!(
            "STS: SignatureDoesNotMatch: credential scope {day}/{region} is not {}/{host_region}",
            &date[..8]
        ));
    }
    let known = CREDENTIALS
        .iter()
        .find(|c| c.access_key == access_key)
        .filter(|c| c.session_token == sts("X-Amz-Security-Token"))
        .ok_or(
            "STS: InvalidClientTokenId: The security token included in the request is invalid.",
        )?;
    let mut headers = Vec::new();
    for name in &signed {
        let value = match *name {
            "host" => host,
            "x-k8s-aws-id" => cluster,
            other => {
                return Err(format!(
                    "STS: SignatureDoesNotMatch: signs header {other:?}, which the authenticator does not send"
                ));
            }
        };
        headers.push((*name, value));
    }
    let unsigned: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| k != "X-Amz-Signature")
        .cloned()
        .collect();
    let expected = signature(known.secret_key, date, region, &unsigned, &headers);
    let given = sts("X-Amz-Signature").unwrap_or("");
    if !same(expected.as_bytes(), given.as_bytes()) {
        return Err("STS: SignatureDoesNotMatch: The request signature we calculated does not match the signature you provided.".into());
    }

    // What the authenticator maps.
    let mapping = MAPPINGS
        .iter()
        .find(|m| m.arn == known.arn)
        .ok_or(format!("ARN is not mapped: {}", known.arn))?;
    Ok(Identity {
        arn: known.arn.to_string(),
        access_key: access_key.to_string(),
        username: mapping.username.to_string(),
        groups: mapping.groups.iter().map(|g| g.to_string()).collect(),
    })
}

/// The region of an STS host: `sts.REGION.amazonaws.com`, or us-east-1
/// for the global `sts.amazonaws.com`.
fn sts_region(host: &str) -> Option<&str> {
    if host == "sts.amazonaws.com" {
        return Some("us-east-1");
    }
    let region = host.strip_prefix("sts.")?.strip_suffix(".amazonaws.com")?;
    let parts: Vec<&str> = region.split('-').collect();
    let valid = parts.len() >= 3
        && parts[0].len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        && parts.last().unwrap().bytes().all(|b| b.is_ascii_digit());
    valid.then_some(region)
}

/// A query component, percent-decoded.
fn decode(s: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| "malformed query parameter".into())
}

/// SigV4's URI encoding: everything but `A-Za-z0-9-_.~` as `%XX`.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The SigV4 signature (hex) of a presigned `GET /` with query `params`
/// (all but the signature) and signed `headers` (in order), as STS
/// computes it: the canonical request, the string to sign, the key
/// derived from `secret`, date, region and `sts`.
pub fn signature(
    secret: &str,
    date: &str,
    region: &str,
    params: &[(String, String)],
    headers: &[(&str, &str)],
) -> String {
    let mut query: Vec<(String, String)> =
        params.iter().map(|(k, v)| (encode(k), encode(v))).collect();
    query.sort();
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
    let canonical = format!(
        "GET\n/\n{}\n{canonical_headers}\n{}\n{}",
        query.join("&"),
        signed.join(";"),
        hex::encode(Sha256::digest(b""))
    );
    let day = &date[..8.min(date.len())];
    let scope = format!("{day}/{region}/sts/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let key = signing_key(secret, day, region, "sts");
    hex::encode(hmac_sha256(&key, to_sign.as_bytes()))
}

/// SigV4's signing key for `secret` on `day` (YYYYMMDD) in `region` for `service`.
pub fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> [u8; 32] {
    let k = hmac_sha256(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let k = hmac_sha256(&k, region.as_bytes());
    let k = hmac_sha256(&k, service.as_bytes());
    hmac_sha256(&k, b"aws4_request")
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner = Sha256::new()
        .chain_update(block.map(|b| b ^ 0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(block.map(|b| b ^ 0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// `YYYYMMDDTHHMMSSZ` as a time.
fn parse_amz_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

#[cfg(test)]
mod tests;
