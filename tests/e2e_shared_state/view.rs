//! The S3 state as a reader sees it, read straight from moto: the snapshot
//! object with the deltas after it (`KEY.log/<seq>.json`) applied in
//! order, as the backend's reader does (its checks are the backend's, and
//! tested there; this view only follows the chain).

use serde_json::Value;

use crate::support::moto::{Moto, authorization, between_all};

/// The keys and sizes of the deltas under `KEY.log/`, in order.
pub fn deltas(moto: &Moto, bucket: &str, key: &str) -> Vec<(String, u64)> {
    let (status, xml) = moto.rest_call(
        "s3",
        "GET",
        &format!("/{bucket}?list-type=2&prefix={key}.log/"),
        "",
    );
    assert_eq!(status, 200, "{xml}");
    between_all(&xml, "<Contents>", "</Contents>")
        .iter()
        .map(|c| {
            let k = between_all(c, "<Key>", "</Key>").remove(0);
            let size = between_all(c, "<Size>", "</Size>")[0].parse().unwrap();
            (k, size)
        })
        .collect()
}

/// The sequence number a delta's key names.
pub fn seq_of(delta_key: &str) -> u64 {
    let name = delta_key.rsplit('/').next().unwrap();
    name.trim_end_matches(".json")
        .parse()
        .expect("a delta's name")
}

/// The snapshot document, with its `steps` and `serial` brought up to
/// the last delta; `None` when there is no snapshot.
pub fn state(moto: &Moto, bucket: &str, key: &str) -> Option<Value> {
    let (status, body) = moto.rest_call("s3", "GET", &format!("/{bucket}/{key}"), "");
    if status == 404 {
        return None;
    }
    let mut doc: Value = serde_json::from_str(&body).expect("the snapshot is JSON");
    let reaches = doc["log_seq"].as_u64().unwrap_or(0);
    let mut steps: std::collections::BTreeMap<String, Value> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s.clone()))
        .collect();
    for (delta_key, _) in deltas(moto, bucket, key) {
        if seq_of(&delta_key) <= reaches {
            continue;
        }
        let delta: Value = serde_json::from_str(&moto.object(bucket, &delta_key)).unwrap();
        for change in delta["changes"].as_array().unwrap() {
            let name = change["name"].as_str().unwrap().to_string();
            match &change["record"] {
                Value::Null => steps.remove(&name),
                record => steps.insert(name, record.clone()),
            };
        }
        doc["serial"] = delta["serial"].clone();
    }
    doc["steps"] = Value::Array(steps.into_values().collect());
    Some(doc)
}

/// Writes `body` as `key` in `bucket`, as another program would.
pub fn put(moto: &Moto, bucket: &str, key: &str, body: &[u8]) {
    let (status, text) = moto.http(
        "PUT",
        &format!("/{bucket}/{key}"),
        &[("Authorization", &authorization("s3"))],
        body,
    );
    assert_eq!(status, 200, "{text}");
}

/// Deletes `key` in `bucket`.
pub fn delete(moto: &Moto, bucket: &str, key: &str) {
    let (status, text) = moto.rest_call("s3", "DELETE", &format!("/{bucket}/{key}"), "");
    assert_eq!(status, 204, "{text}");
}
