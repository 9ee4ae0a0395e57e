//! The webhook's verifier against flow's real token (the text
//! providers/src/eks_access/token.rs pins for the same inputs) and tokens
//! made here, one refusal per check.

use super::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// flow's token for `dlc`, from the credentials testing/testing/testing,
/// signed at 2023-11-14T22:13:20Z (see `GOLDEN` in
/// providers/src/eks_access/token.rs).
const FLOW_TOKEN: &str = "k8s-aws-v1.aHR0cHM6Ly9zdHMudXMtZWFzdC0xLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZWZXJzaW9uPTIwMTEtMDYtMTUmWC1BbXotQWxnb3JpdGhtPUFXUzQtSE1BQy1TSEEyNTYmWC1BbXotQ3JlZGVudGlhbD10ZXN0aW5nJTJGMjAyMzExMTQlMkZ1cy1lYXN0LTElMkZzdHMlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDIzMTExNFQyMjEzMjBaJlgtQW16LUV4cGlyZXM9NjAmWC1BbXotU2lnbmVkSGVhZGVycz1ob3N0JTNCeC1rOHMtYXdzLWlkJlgtQW16LVNpZ25hdHVyZT0wMzk3NzViNWM5YTE0Yjc2NjkyYjdmZWRiOTI3ZGRjOTYxNDMzMzRkNWU5ZmM0MzFmNzdkM2I4MTE5MTVmNGYzJlgtQW16LVNlY3VyaXR5LVRva2VuPXRlc3Rpbmc";

/// When [`FLOW_TOKEN`] was signed.
fn signed_at() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// A minute after signing.
fn soon() -> SystemTime {
    signed_at() + Duration::from_secs(60)
}

/// The presigned URL a token carries.
fn url_of(token: &str) -> String {
    let body = token.strip_prefix(PREFIX).unwrap();
    String::from_utf8(URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap()
}

/// The token for `url`.
fn token_of(url: &str) -> String {
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(url))
}

/// A token made here: `params` (name, value) signed with `secret` for
/// `cluster` at `date`, signing `headers` (names).
fn made(params: &[(&str, &str)], secret: &str, cluster: &str, headers: &[&str]) -> String {
    let host = "sts.us-east-1.amazonaws.com";
    let get = |k: &str| {
        params
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| *v)
            .unwrap_or("")
    };
    let owned: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let values: Vec<(&str, &str)> = headers
        .iter()
        .map(|h| (*h, if *h == "host" { host } else { cluster }))
        .collect();
    let sig = signature(secret, get("X-Amz-Date"), "us-east-1", &owned, &values);
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    token_of(&format!(
        "https://{host}/?{}&X-Amz-Signature={sig}",
        query.join("&")
    ))
}

/// The parameters flow signs, at [`signed_at`], with `headers` signed.
fn flow_params(headers: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Action", "GetCallerIdentity".into()),
        ("Version", "2011-06-15".into()),
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256".into()),
        (
            "X-Amz-Credential",
            "testing/20231114/us-east-1/sts/aws4_request".into(),
        ),
        ("X-Amz-Date", "20231114T221320Z".into()),
        ("X-Amz-Expires", "60".into()),
        ("X-Amz-SignedHeaders", headers.into()),
        ("X-Amz-Security-Token", "testing".into()),
    ]
}

fn refusal(token: &str, cluster: &str, now: SystemTime) -> String {
    verify(token, cluster, now).expect_err("refused")
}

#[test]
fn hmac_and_the_signing_key_match_published_vectors() {
    // RFC 4231, test case 2.
    assert_eq!(
        hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // RFC 4231, test case 6 (a key longer than the block).
    assert_eq!(
        hex::encode(hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // AWS's example of deriving a SigV4 signing key.
    assert_eq!(
        hex::encode(signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam"
        )),
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
    );
    assert_eq!(parse_amz_date("20231114T221320Z"), Some(signed_at()));
    assert_eq!(parse_amz_date("20231314T221320Z"), None);
}

#[test]
fn flows_token_is_accepted_and_maps_to_the_named_user() {
    let who = verify(FLOW_TOKEN, "dlc", soon()).unwrap();
    assert_eq!(who.arn, "arn:aws:iam::123456789012:user/flow-e2e");
    assert_eq!(who.access_key, "testing");
    assert_eq!(who.username, "flow-e2e-admin");
    assert_eq!(who.groups, vec![ADMIN_GROUP.to_string()]);
    assert!(!who.groups.iter().any(|g| g == "system:masters"));
    // The same token, made here from the same inputs.
    let params = flow_params("host;x-k8s-aws-id");
    let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let here = made(&params, "testing", "dlc", &["host", "x-k8s-aws-id"]);
    assert_eq!(
        url_of(&here).split("X-Amz-Signature=").nth(1),
        url_of(FLOW_TOKEN)
            .split("X-Amz-Signature=")
            .nth(1)
            .map(|s| s.split('&').next().unwrap()),
    );
}

#[test]
fn a_token_for_another_cluster_is_refused() {
    let e = refusal(FLOW_TOKEN, "prod", soon());
    assert!(e.starts_with("STS: SignatureDoesNotMatch"), "{e}");
}

#[test]
fn a_token_signed_with_other_credentials_is_refused() {
    let params = flow_params("host;x-k8s-aws-id");
    let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let e = refusal(
        &made(&params, "not-the-secret", "dlc", &["host", "x-k8s-aws-id"]),
        "dlc",
        soon(),
    );
    assert!(e.starts_with("STS: SignatureDoesNotMatch"), "{e}");
    // An access key STS does not know, and a missing session token.
    let other = url_of(FLOW_TOKEN).replace("Credential=testing%2F", "Credential=AKIAOTHER%2F");
    let e = refusal(&token_of(&other), "dlc", soon());
    assert!(e.starts_with("STS: InvalidClientTokenId"), "{e}");
    let without = url_of(FLOW_TOKEN).replace("&X-Amz-Security-Token=testing", "");
    let e = refusal(&token_of(&without), "dlc", soon());
    assert!(e.starts_with("STS: InvalidClientTokenId"), "{e}");
}

#[test]
fn a_known_identity_without_a_mapping_is_refused() {
    let params = flow_params("host;x-k8s-aws-id");
    let mut params: Vec<(&str, &str)> = params
        .iter()
        .filter(|(k, _)| *k != "X-Amz-Security-Token")
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    for p in &mut params {
        if p.0 == "X-Amz-Credential" {
            p.1 = "AKIAUNMAPPEDEXAMPLE/20231114/us-east-1/sts/aws4_request";
        }
    }
    let token = made(&params, "unmapped-secret", "dlc", &["host", "x-k8s-aws-id"]);
    assert_eq!(
        refusal(&token, "dlc", soon()),
        "ARN is not mapped: arn:aws:iam::123456789012:user/no-access-entry"
    );
}

#[test]
fn a_token_is_good_for_fifteen_minutes_from_its_date() {
    let edge = signed_at() + Duration::from_secs(15 * 60);
    verify(FLOW_TOKEN, "dlc", edge).unwrap();
    let e = refusal(FLOW_TOKEN, "dlc", edge + Duration::from_secs(1));
    assert_eq!(
        e,
        "X-Amz-Date parameter is expired (15 minute expiration) 20231114T221320Z"
    );
    // Dated too far ahead of the verifier's clock.
    let e = refusal(FLOW_TOKEN, "dlc", signed_at() - Duration::from_secs(301));
    assert!(e.contains("not yet current"), "{e}");
}

#[test]
fn every_flipped_bit_is_refused() {
    for bit in [0x01, 0x02, 0x20] {
        for i in 0..FLOW_TOKEN.len() {
            let mut bytes = FLOW_TOKEN.as_bytes().to_vec();
            bytes[i] ^= bit;
            let Ok(token) = String::from_utf8(bytes) else {
                continue;
            };
            assert!(
                verify(&token, "dlc", soon()).is_err(),
                "token byte {i} ^ {bit:#x} accepted"
            );
        }
        let url = url_of(FLOW_TOKEN);
        for i in 0..url.len() {
            let b = url.as_bytes();
            // `%2f` is `%2F` spelt otherwise: the same URL (RFC 3986, 2.1).
            let escaped = (i >= 1 && b[i - 1] == b'%') || (i >= 2 && b[i - 2] == b'%');
            if escaped && bit == 0x20 && b[i].is_ascii_alphabetic() {
                continue;
            }
            let mut bytes = b.to_vec();
            bytes[i] ^= bit;
            let Ok(altered) = String::from_utf8(bytes) else {
                continue;
            };
            let token = token_of(&altered);
            assert!(
                verify(&token, "dlc", soon()).is_err(),
                "URL byte {i} ({:?}) ^ {bit:#x} accepted: {altered}",
                &url[i..i + 1]
            );
        }
    }
    let flipped = flip_a_bit(FLOW_TOKEN);
    assert_eq!(
        url_of(&flipped),
        url_of(FLOW_TOKEN).replace("X-Amz-Date=20231114T221320Z", "X-Amz-Date=20231114T221321Z")
    );
    let e = refusal(&flipped, "dlc", soon());
    assert!(e.starts_with("STS: SignatureDoesNotMatch"), "{e}");
}

#[test]
fn the_authenticators_checks_of_the_url() {
    let url = url_of(FLOW_TOKEN);
    let cases: Vec<(String, &str)> = vec![
        ("k8s-aws-v2.abc".into(), "prefix"),
        (format!("{PREFIX}{}", "A".repeat(5000)), "too large"),
        (token_of(&url.replacen("https://", "http://", 1)), "scheme"),
        (
            token_of(&url.replace("sts.us-east-1.amazonaws.com", "sts.evil.example")),
            "hostname",
        ),
        (token_of(&url.replace(".com/?", ".com/x?")), "path"),
        (
            token_of(&url.replace("Action=GetCallerIdentity", "Action=AssumeRole")),
            "action",
        ),
        (
            token_of(&format!("{url}&X-Amz-User-Agent=x")),
            "non-whitelisted",
        ),
        (
            token_of(&format!("{url}&Action=GetCallerIdentity")),
            "multiple values",
        ),
        (
            token_of(&url.replace("X-Amz-Expires=60", "X-Amz-Expires=901")),
            "X-Amz-Expires",
        ),
        (
            token_of(&url.replace("host%3Bx-k8s-aws-id", "host")),
            "x-k8s-aws-id",
        ),
        (
            token_of(&url.replace("20231114T221320Z", "20231114T221320")),
            "X-Amz-Date",
        ),
        (
            token_of(&url.replace("X-Amz-Signature=", "X-Amz-SiGnature=")),
            "no X-Amz-Signature",
        ),
        (
            token_of(&url.replace("%2Fsts%2F", "%2Fiam%2F")),
            "credential scope",
        ),
    ];
    for (token, why) in cases {
        let e = refusal(&token, "dlc", soon());
        assert!(e.contains(why), "{why}: {e}");
    }
    // Signing another header than the two the authenticator sends.
    let params = flow_params("accept;host;x-k8s-aws-id");
    let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = made(&params, "testing", "dlc", &["host", "x-k8s-aws-id"]);
    assert!(refusal(&token, "dlc", soon()).contains("\"accept\""));
}
