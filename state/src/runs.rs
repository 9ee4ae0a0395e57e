//! The run history: one [`RunRecord`] per run of a job step (what it
//! measured, how its gates judged it, how long it took, where its log is).
//! Append-only, one JSON line per run in `runs.jsonl` beside the state's
//! database, so that `destroy`, which forgets steps, leaves it, and a line
//! damaged by a crash mid-write costs that run alone; for an S3 state each
//! run is also written
//! once as its own object beside the state (`KEY.runs/ID.json`) through a
//! [`RunMirror`], and `pull` brings the team's runs into the local copy.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::StateError;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// The job ran and its gates passed.
    Succeeded,
    /// The job failed, or a gate did.
    Failed,
}

/// One gate's verdict on one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateVerdict {
    /// The value judged (`busbw`).
    pub name: String,
    /// The gate as written, after interpolation (`>= 300`).
    pub gate: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// One run of a job step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Unique and sorting by start time: `20261126T070102.123Z-nccl-1a2b3c`.
    pub id: String,
    /// When it started (RFC 3339, UTC).
    pub started: String,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The workflow's name.
    pub workflow: String,
    /// The step's address.
    pub step: String,
    /// The provider kind (`kube.job`).
    pub provider: String,
    /// The digest of the inputs it ran with (secrets sealed).
    pub inputs_digest: String,
    /// The digest of each top-level input it ran with, by name (secrets
    /// sealed), so that two runs can say which inputs differ. Empty in runs
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_digests: BTreeMap<String, String>,
    /// How it ended.
    pub outcome: RunOutcome,
    /// The failure, when it failed (secrets masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What it captured and what `parse` read (numbers, tables, text).
    #[serde(default)]
    pub values: Map<String, Value>,
    /// Each gate's verdict.
    #[serde(default)]
    pub verdicts: Vec<GateVerdict>,
    /// The step's log file.
    pub log: String,
}

/// Where an S3 state keeps its runs besides the local copy.
pub trait RunMirror: Send + Sync {
    /// Writes run `id` (its JSON) once.
    fn put(&self, id: &str, body: Vec<u8>) -> Result<(), StateError>;
    /// The runs kept there whose ids are not in `known`, as JSON.
    fn missing(&self, known: &HashSet<String>) -> Result<Vec<Vec<u8>>, StateError>;
}

/// The run history of one state: `runs.jsonl` in the state's folder, one
/// run per line, appended and synced, never rewritten. Cheap to clone.
#[derive(Clone)]
pub struct RunLog {
    path: PathBuf,
    mirror: Option<Arc<dyn RunMirror>>,
    /// Another process may be appending to it as it is read.
    being_written: bool,
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("path", &self.path)
            .field("mirrored", &self.mirror.is_some())
            .finish()
    }
}

/// A line that could not be read back, named for the warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Its line in `runs.jsonl`, from 1.
    pub line: usize,
    /// The run's id, when it can still be read.
    pub id: Option<String>,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "run {id} (line {} of the run history)", self.line),
            None => write!(f, "line {} of the run history", self.line),
        }
    }
}

/// What a listing shows of a run, read without building its tables.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run's id.
    pub id: String,
    /// The step.
    pub step: String,
    /// How it ended.
    pub outcome: RunOutcome,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// Gates passed, and gates in all.
    pub gates: (usize, usize),
    /// Each value as JSON text; tables as `(N entries)`.
    pub values: Vec<(String, String)>,
}

/// The fields of a line a listing reads; values stay raw text.
#[derive(Deserialize)]
struct Peek {
    id: String,
    step: String,
    outcome: RunOutcome,
    duration_ms: u64,
    #[serde(default)]
    verdicts: Vec<PeekVerdict>,
    #[serde(default)]
    values: std::collections::BTreeMap<String, Brief>,
}

#[derive(Deserialize)]
struct PeekVerdict {
    passed: bool,
}

/// Just the id and step of a line.
#[derive(Deserialize)]
struct Key {
    id: String,
    step: String,
}

impl RunLog {
    pub(crate) fn new(path: PathBuf) -> RunLog {
        RunLog {
            path,
            mirror: None,
            being_written: false,
        }
    }

    /// The same history, read while another process may be appending a
    /// run: a last line not ended yet is that run, half written, and is
    /// left out rather than reported damaged.
    pub(crate) fn being_written(mut self) -> RunLog {
        self.being_written = true;
        self
    }

    /// The same history, each run also written to `mirror`.
    pub fn mirrored(mut self, mirror: Arc<dyn RunMirror>) -> RunLog {
        self.mirror = Some(mirror);
        self
    }

    fn io(&self, e: std::io::Error) -> StateError {
        StateError::io(&self.path, e)
    }

    /// Appends `lines` (each a run's JSON) and syncs them to disk.
    fn write_lines(&self, lines: &[Vec<u8>]) -> Result<(), StateError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        let mut buf = Vec::new();
        for line in lines {
            buf.extend_from_slice(line);
            buf.push(b'\n');
        }
        file.write_all(&buf).map_err(|e| self.io(e))?;
        file.sync_data().map_err(|e| self.io(e))
    }

    /// Records `run` durably (synced locally, then written to the mirror).
    pub fn append(&self, run: &RunRecord) -> Result<(), StateError> {
        let body = serde_json::to_vec(run)
            .map_err(|e| StateError::Sled(format!("run {} cannot be encoded: {e}", run.id)))?;
        self.write_lines(std::slice::from_ref(&body))?;
        if let Some(m) = &self.mirror {
            m.put(&run.id, body)?;
        }
        Ok(())
    }

    /// The file's text (empty when no run was recorded yet).
    fn text(&self) -> Result<String, StateError> {
        match std::fs::read(&self.path) {
            Ok(mut bytes) if self.being_written => {
                bytes.truncate(bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1));
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Ok(bytes) => Ok(String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(self.io(e)),
        }
    }

    /// Each non-empty line with its number.
    fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty())
    }

    fn damaged(n: usize, line: &str, e: &serde_json::Error) -> Unreadable {
        Unreadable {
            line: n,
            id: serde_json::from_str::<Key>(line).ok().map(|k| k.id),
            why: e.to_string(),
        }
    }

    /// Every run, in the order recorded, and the lines that could not be
    /// read (skipped, to be warned about; never fatal).
    pub fn all(&self) -> Result<(Vec<RunRecord>, Vec<Unreadable>), StateError> {
        let text = self.text()?;
        let (mut runs, mut bad) = (Vec::new(), Vec::new());
        for (n, line) in Self::lines(&text) {
            match serde_json::from_str::<RunRecord>(line) {
                Ok(r) => runs.push(r),
                Err(e) => bad.push(Self::damaged(n, line, &e)),
            }
        }
        Ok((runs, bad))
    }

    /// What a listing shows of each run (of `step` only, when given),
    /// without building the runs' tables.
    pub fn summaries(
        &self,
        step: Option<&str>,
    ) -> Result<(Vec<RunSummary>, Vec<Unreadable>), StateError> {
        let text = self.text()?;
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for (n, line) in Self::lines(&text) {
            let p = match serde_json::from_str::<Peek>(line) {
                Ok(p) => p,
                Err(e) => {
                    bad.push(Self::damaged(n, line, &e));
                    continue;
                }
            };
            if step.is_some_and(|s| s != p.step) {
                continue;
            }
            out.push(RunSummary {
                gates: (
                    p.verdicts.iter().filter(|v| v.passed).count(),
                    p.verdicts.len(),
                ),
                values: p
                    .values
                    .iter()
                    .map(|(k, b)| (k.clone(), b.0.clone()))
                    .collect(),
                id: p.id,
                step: p.step,
                outcome: p.outcome,
                duration_ms: p.duration_ms,
            })
        }
        Ok((out, bad))
    }

    /// The runs of `step` (every run when `None`) as their JSON lines, as
    /// stored: for `--json`, without decoding them.
    pub fn raw(&self, step: Option<&str>) -> Result<(Vec<String>, Vec<Unreadable>), StateError> {
        let text = self.text()?;
        let (mut out, mut bad) = (Vec::new(), Vec::new());
        for (n, line) in Self::lines(&text) {
            match serde_json::from_str::<Key>(line) {
                Ok(k) if step.is_none_or(|s| s == k.step) => out.push(line.to_string()),
                Ok(_) => {}
                Err(e) => bad.push(Self::damaged(n, line, &e)),
            }
        }
        Ok((out, bad))
    }

    /// Brings the mirror's runs this copy lacks into it (others' runs of a
    /// shared state); how many came. Nothing to do without a mirror.
    pub fn pull(&self) -> Result<usize, StateError> {
        let Some(m) = &self.mirror else {
            return Ok(0);
        };
        let text = self.text()?;
        let known: HashSet<String> = Self::lines(&text)
            .filter_map(|(_, l)| serde_json::from_str::<Key>(l).ok().map(|k| k.id))
            .collect();
        let lines: Vec<Vec<u8>> = m
            .missing(&known)?
            .into_iter()
            // One line per run: a pretty-printed object is made compact.
            .map(|body| {
                serde_json::from_slice::<Value>(&body)
                    .and_then(|v| serde_json::to_vec(&v))
                    .unwrap_or(body)
            })
            .collect();
        if !lines.is_empty() {
            self.write_lines(&lines)?;
        }
        Ok(lines.len())
    }

    /// Appends raw bytes as a line (tests of damaged records).
    #[doc(hidden)]
    pub fn put_raw(&self, line: &[u8]) -> Result<(), StateError> {
        self.write_lines(&[line.to_vec()])
    }
}

/// A value as a listing shows it, read in one pass: numbers and text as
/// they are, a table as `(N entries)`, its contents skipped, not built.
#[derive(Debug, Clone, PartialEq)]
struct Brief(String);

impl<'de> Deserialize<'de> for Brief {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Brief, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Brief;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Brief, E> {
                Ok(Brief(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Brief, E> {
                Ok(Brief(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Brief, E> {
                Ok(Brief(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Brief, E> {
                Ok(Brief(Value::from(v).to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Brief, E> {
                Ok(Brief(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Brief, E> {
                Ok(Brief("null".into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Brief, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Brief(format!("({n} entries)")))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Brief, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Brief(format!("({n} entries)")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A run id: its start time to the millisecond, the step, and a random tail.
pub fn run_id(started_ms: u64, step: &str) -> String {
    let secs = started_ms / 1000;
    let stamp = crate::timefmt::format_rfc3339(secs)
        .replace(['-', ':'], "")
        .trim_end_matches('Z')
        .to_string();
    let safe: String = step
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "{stamp}.{:03}Z-{safe}-{:06x}",
        started_ms % 1000,
        rand_tail() & 0xff_ffff
    )
}

fn rand_tail() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> (tempfile::TempDir, RunLog) {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::new(dir.path().join("runs.jsonl"));
        (dir, log)
    }

    fn run(id: &str, busbw: f64) -> RunRecord {
        RunRecord {
            id: id.into(),
            started: "2026-11-26T07:00:00Z".into(),
            duration_ms: 1200,
            workflow: "wf".into(),
            step: "nccl".into(),
            provider: "kube.job".into(),
            inputs_digest: "d".into(),
            input_digests: BTreeMap::new(),
            outcome: RunOutcome::Succeeded,
            error: None,
            values: serde_json::json!({"busbw": busbw})
                .as_object()
                .unwrap()
                .clone(),
            verdicts: vec![GateVerdict {
                name: "busbw".into(),
                gate: ">= 100".into(),
                passed: true,
                why: None,
            }],
            log: "logs/nccl.log".into(),
        }
    }

    #[test]
    fn runs_come_back_in_order_and_a_damaged_line_is_named_not_fatal() {
        let (d, l) = log();
        assert_eq!(l.all().unwrap(), (vec![], vec![]), "no file yet: no runs");
        l.append(&run("20261126T070001.000Z-nccl-000001", 1.0))
            .unwrap();
        // A line cut short by a crash, and one whose fields do not decode.
        l.put_raw(br#"{"id":"20261126T070002.000Z-nccl-000002","step":"nccl","outc"#)
            .unwrap();
        l.put_raw(br#"{"id":"20261126T070003.000Z-x-000003","step":"x","duration_ms":"soon"}"#)
            .unwrap();
        l.append(&run("20261126T070004.000Z-nccl-000004", 4.0))
            .unwrap();
        let (runs, bad) = l.all().unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].values["busbw"], 4.0);
        let named: Vec<String> = bad.iter().map(ToString::to_string).collect();
        assert_eq!(
            named,
            [
                "line 2 of the run history",
                "run 20261126T070003.000Z-x-000003 (line 3 of the run history)"
            ]
        );
        let (listed, bad) = l.summaries(Some("nccl")).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(bad.len(), 2);
        assert_eq!(listed[0].gates, (1, 1));
        assert_eq!(listed[0].values, [("busbw".to_string(), "1.0".to_string())]);
        let (raw, _) = l.raw(Some("nccl")).unwrap();
        assert_eq!(serde_json::from_str::<RunRecord>(&raw[1]).unwrap(), runs[1]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("runs.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }

    #[test]
    fn a_listing_counts_a_tables_entries_and_shows_text_as_it_is() {
        let brief = |raw: &str| serde_json::from_str::<Brief>(raw).unwrap().0;
        assert_eq!(brief(r#"{"8":{"a":1},"16":{"a":2}}"#), "(2 entries)");
        assert_eq!(brief("[[1,2.0],[2,1.5],[3,1.2]]"), "(3 entries)");
        assert_eq!(brief(r#""A100""#), "A100");
        assert_eq!(brief("186.437"), "186.437");
        assert_eq!(brief("8"), "8");
        assert_eq!(brief("null"), "null");
    }

    #[test]
    fn ids_sort_by_time_and_name_the_step() {
        let a = run_id(1_764_140_462_123, "cluster.nccl");
        let b = run_id(1_764_140_463_000, "cluster.nccl");
        assert!(a < b, "{a} {b}");
        assert!(a.starts_with("20251126T070102.123Z-cluster-nccl-"), "{a}");
        assert_ne!(
            run_id(1, "x"),
            run_id(1, "x"),
            "the tail tells apart runs of one millisecond"
        );
    }

    struct Shelf(std::sync::Mutex<Vec<(String, Vec<u8>)>>);
    impl RunMirror for Shelf {
        fn put(&self, id: &str, body: Vec<u8>) -> Result<(), StateError> {
            self.0.lock().unwrap().push((id.into(), body));
            Ok(())
        }
        fn missing(&self, known: &HashSet<String>) -> Result<Vec<Vec<u8>>, StateError> {
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|(id, _)| !known.contains(id))
                .map(|(_, b)| b.clone())
                .collect())
        }
    }

    #[test]
    fn a_mirrored_log_writes_each_run_there_and_pulls_the_others() {
        let shelf = Arc::new(Shelf(std::sync::Mutex::new(Vec::new())));
        let (_d1, mine) = log();
        let mine = mine.mirrored(shelf.clone());
        let (_d2, theirs) = log();
        let theirs = theirs.mirrored(shelf.clone());
        mine.append(&run("20261126T070001.000Z-nccl-000001", 1.0))
            .unwrap();
        theirs
            .append(&run("20261126T070002.000Z-nccl-000002", 2.0))
            .unwrap();
        assert_eq!(shelf.0.lock().unwrap().len(), 2);
        assert_eq!(mine.pull().unwrap(), 1);
        assert_eq!(mine.pull().unwrap(), 0, "once");
        assert_eq!(mine.all().unwrap().0.len(), 2);
    }
}
