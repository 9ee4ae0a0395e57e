//! Looking at a file system: finding it by id or by operation token, its
//! tags and lifecycle, and the outputs state keeps of it.

use std::collections::BTreeMap;

use aws_sdk_fsx::Client;
use aws_sdk_fsx::types::FileSystem;
use serde_json::Value;

use crate::aws::{error, tags};
use crate::contract::{Applied, ProviderError, Values};

/// The value of the file system's tag `key`.
pub(super) fn tag<'a>(fs: &'a FileSystem, key: &str) -> Option<&'a str> {
    fs.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// The file system's tags as a map.
pub(super) fn tag_map(fs: &FileSystem) -> BTreeMap<String, String> {
    fs.tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

/// Its lifecycle; a service that reports none (some emulators) counts as available.
pub(super) fn lifecycle(fs: &FileSystem) -> &str {
    fs.lifecycle().map_or("AVAILABLE", |l| l.as_str())
}

/// What state keeps of an available file system.
pub(super) fn applied(fs: &FileSystem) -> Applied {
    let mut outputs = Values::new();
    let id = fs.file_system_id().unwrap_or_default().to_string();
    outputs.insert("file_system_id".into(), Value::String(id.clone()));
    outputs.insert(
        "dns_name".into(),
        Value::String(fs.dns_name().unwrap_or_default().to_string()),
    );
    let mount = fs
        .lustre_configuration()
        .and_then(|l| l.mount_name())
        .unwrap_or_default();
    outputs.insert("mount_name".into(), Value::String(mount.to_string()));
    Applied {
        id: Some(id),
        outputs,
        private: Value::Null,
    }
}

/// The file system `id`, if it exists.
pub(super) async fn describe(
    client: &Client,
    id: &str,
) -> Result<Option<FileSystem>, ProviderError> {
    match client
        .describe_file_systems()
        .file_system_ids(id)
        .send()
        .await
    {
        Ok(out) => Ok(out.file_systems().first().cloned()),
        Err(e) if error::code(&e) == Some("FileSystemNotFound") => Ok(None),
        Err(e) => Err(error::aws(&format!("describe file system `{id}`"), e)),
    }
}

/// The file system tagged with operation token `token`, if any.
pub(super) async fn find_by_token(
    client: &Client,
    token: &str,
) -> Result<Option<FileSystem>, ProviderError> {
    let mut next: Option<String> = None;
    loop {
        let out = client
            .describe_file_systems()
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| error::aws("list file systems", e))?;
        if let Some(fs) = out
            .file_systems()
            .iter()
            .find(|fs| tag(fs, tags::TOKEN) == Some(token) && lifecycle(fs) != "DELETING")
        {
            return Ok(Some(fs.clone()));
        }
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => return Ok(None),
        }
    }
}
