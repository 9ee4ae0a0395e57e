//! Scanning everything flow printed or wrote for a secret, in clear or in
//! any encoded form: base64 (standard and URL-safe, at each byte alignment
//! it can have inside longer text), hex, JSON-escaped, URL-encoded and
//! shell-quoted.
//!
//! A scan collects places, each of a [`Kind`]: the files under a folder
//! (sorted into state files, backups, step logs, run history, saved plans,
//! reports and other files), S3 state objects, and, for every command run
//! through [`SecretScan::command`], its stdout and stderr and the
//! `/proc/PID/cmdline` and `/proc/PID/environ` of the flow process and each
//! of its descendants, sampled while it runs (`proc_sampler`).
//!
//! A search that finds nothing proves nothing unless it read something, so
//! every kind of place the scan holds needs a control: bytes flow itself
//! wrote there and that no input of the test contains (an operation token,
//! a fingerprint, a run id, read back after the run). [`SecretScan::assert_clean`]
//! fails naming each kind whose control it did not find ("the scan read no
//! step logs: …"), and a control found in an input (the workflow file, an
//! argument or variable a command was given) is refused as proving nothing.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::Run;
use super::proc_sampler::{self, Role};

/// Every form `secret` can take in flow's output or files.
pub fn forms(secret: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = vec![("clear".into(), secret.as_bytes().to_vec())];
    let engines = [
        ("base64", base64::engine::general_purpose::STANDARD_NO_PAD),
        (
            "base64url",
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ),
    ];
    for (name, engine) in engines {
        for shift in 0..3usize {
            let mut bytes = vec![0u8; shift];
            bytes.extend_from_slice(secret.as_bytes());
            let encoded = engine.encode(&bytes);
            let skip = (shift * 4).div_ceil(3);
            let end = if bytes.len() % 3 == 0 {
                encoded.len()
            } else {
                encoded.len() - 1
            };
            if end > skip + 8 {
                out.push((
                    format!("{name} (offset {shift})"),
                    encoded.as_bytes()[skip..end].to_vec(),
                ));
            }
        }
    }
    out.push(("hex".into(), hex::encode(secret).into_bytes()));
    out.push(("HEX".into(), hex::encode_upper(secret).into_bytes()));
    let json = serde_json::Value::String(secret.into()).to_string();
    let url = percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
        .to_string();
    for (name, form) in [
        ("JSON-escaped", json[1..json.len() - 1].to_string()),
        ("URL-encoded", url),
        ("single-quoted", secret.replace('\'', r"'\''")),
        ("backslash-escaped (printf %q)", backslashed(secret)),
    ] {
        if form != secret {
            out.push((name.into(), form.into_bytes()));
        }
    }
    out
}

/// `secret` as bash's `printf %q` writes a word without control
/// characters: every byte but letters, digits and `,._+:@%/-=` behind a
/// backslash.
fn backslashed(secret: &str) -> String {
    let mut out = String::new();
    for c in secret.chars() {
        if !(c.is_ascii_alphanumeric() || ",._+:@%/-=".contains(c)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What kind of place a scanned text is; each kind present needs a control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The state folder's own files: the database, its log, `serial`,
    /// `last-run.json`, the lock.
    State,
    /// `backups/state-*.json`.
    Backups,
    /// `logs/<step>.log`.
    StepLogs,
    /// `runs.jsonl` (and an S3 state's `KEY.runs/` objects).
    RunHistory,
    /// A plan file `plan --out` wrote.
    SavedPlan,
    /// An HTML report `flow report` wrote.
    Report,
    /// The objects of an S3 state.
    S3State,
    /// A command's stdout and stderr.
    Output,
    /// `/proc/PID/cmdline` of flow or a descendant, while a command ran.
    Cmdline,
    /// `/proc/PID/environ` of flow or a descendant, while a command ran.
    Environ,
    /// Files that are none of flow's places (the workflow, the user's
    /// config): searched, with no control asked for.
    Other,
}

impl Kind {
    /// The kind's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::State => "state files",
            Kind::Backups => "state backups",
            Kind::StepLogs => "step logs",
            Kind::RunHistory => "run history",
            Kind::SavedPlan => "saved plans",
            Kind::Report => "reports",
            Kind::S3State => "S3 state objects",
            Kind::Output => "command output",
            Kind::Cmdline => "process command lines",
            Kind::Environ => "process environments",
            Kind::Other => "other files",
        }
    }

    /// The kind of `file` (found under `root`), from where it is and how
    /// it begins.
    pub fn of_file(root: &Path, file: &Path, bytes: &[u8]) -> Kind {
        let head = &bytes[..bytes.len().min(200)];
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = file.parent().unwrap_or(root);
        let in_dir = |dir: &str| {
            file.strip_prefix(root)
                .map(|r| r.components().any(|c| c.as_os_str() == dir))
                .unwrap_or(false)
        };
        if contains(head, br#""format": "flow-plan""#) {
            Kind::SavedPlan
        } else if contains(head, b"flow-state-backup") || in_dir("backups") {
            Kind::Backups
        } else if name == "runs.jsonl" || parent.to_string_lossy().ends_with(".runs") {
            Kind::RunHistory
        } else if in_dir("logs") && name.ends_with(".log") {
            Kind::StepLogs
        } else if name.ends_with(".html") && contains(bytes, b"<html") {
            Kind::Report
        } else if parent
            .ancestors()
            .take_while(|a| a.starts_with(root))
            .any(|a| a.join("serial").is_file() || a.join("db").is_dir())
        {
            Kind::State
        } else {
            Kind::Other
        }
    }
}

struct Place {
    kind: Kind,
    /// The command it came from, or when the files were read.
    scope: String,
    label: String,
    bytes: Vec<u8>,
}

struct Control {
    kind: Kind,
    /// Only places of this scope count, when set.
    scope: Option<String>,
    what: String,
    bytes: Vec<u8>,
}

/// The places to look in, the controls that show they were read, and the
/// test's inputs, which no control may come from.
#[derive(Default)]
pub struct SecretScan {
    places: Vec<Place>,
    controls: Vec<Control>,
    /// Kinds the test says no flow-made control exists for, and why.
    uncontrolled: Vec<(Kind, String)>,
    inputs: Vec<(String, Vec<u8>)>,
    /// Variables that may hold the secret: in flow's own environment (the
    /// test gave it there), and in its descendants' (the workflow passes it).
    flow_env: Vec<String>,
    child_env: Vec<String>,
    controls_checked: AtomicBool,
}

impl SecretScan {
    /// An empty scan.
    pub fn new() -> Self {
        SecretScan::default()
    }

    /// A place of `kind`.
    pub fn place(&mut self, kind: Kind, scope: &str, label: &str, bytes: &[u8]) -> &mut Self {
        self.places.push(Place {
            kind,
            scope: scope.into(),
            label: label.into(),
            bytes: bytes.to_vec(),
        });
        self
    }

    /// Text flow printed, named `label`.
    pub fn text(&mut self, label: &str, text: &str) -> &mut Self {
        self.place(Kind::Output, label, label, text.as_bytes())
    }

    /// A run's stdout and stderr.
    pub fn run(&mut self, label: &str, run: &Run) -> &mut Self {
        self.place(
            Kind::Output,
            label,
            &format!("{label} (stdout)"),
            run.stdout.as_bytes(),
        );
        self.place(
            Kind::Output,
            label,
            &format!("{label} (stderr)"),
            run.stderr.as_bytes(),
        )
    }

    /// An object of an S3 state, as read from the bucket.
    pub fn s3_object(&mut self, key: &str, bytes: &[u8]) -> &mut Self {
        self.place(Kind::S3State, "S3", &format!("s3 object {key}"), bytes)
    }

    /// Every file under `dir`, except those `skip` says the user wrote,
    /// each of the kind [`Kind::of_file`] gives it.
    pub fn tree(&mut self, dir: &Path, skip: impl Fn(&Path) -> bool) -> &mut Self {
        self.tree_as_of("files", dir, skip)
    }

    /// [`SecretScan::tree`] read at a named moment (`before destroy`): a
    /// destroy forgets steps, so state read only after it holds none.
    pub fn tree_as_of(
        &mut self,
        when: &str,
        dir: &Path,
        skip: impl Fn(&Path) -> bool,
    ) -> &mut Self {
        for file in super::files_under(dir) {
            if skip(&file) {
                continue;
            }
            if let Ok(bytes) = std::fs::read(&file) {
                let kind = Kind::of_file(dir, &file, &bytes);
                let label = format!("{} ({when})", file.display());
                self.place(kind, when, &label, &bytes);
            }
        }
        self
    }

    /// Text the test gave flow (a workflow file, a variable): no control
    /// may be found in it. A command's arguments and environment are
    /// inputs already.
    pub fn input(&mut self, label: &str, bytes: impl AsRef<[u8]>) -> &mut Self {
        self.inputs.push((label.into(), bytes.as_ref().to_vec()));
        self
    }

    /// The variables that may hold the secret in `/proc/PID/environ`:
    /// `flow`'s in the flow process (the test gave them), `children`'s in
    /// its descendants (the workflow passes them on purpose). Their values
    /// are left out of the environ places; anywhere else it is a leak.
    pub fn secret_env(&mut self, flow: &[&str], children: &[&str]) -> &mut Self {
        self.flow_env = flow.iter().map(|s| s.to_string()).collect();
        self.child_env = children.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Runs `cmd` (a flow command) to the end while sampling the
    /// command line and environment of its process and every descendant;
    /// its output and the samples become places of scope `label`, and its
    /// arguments and environment inputs. Fails if the flow process itself
    /// was never read (so no command escapes the sampler).
    pub fn command(&mut self, label: &str, cmd: Command) -> Run {
        for arg in cmd.get_args() {
            self.input(&format!("an argument of `{label}`"), arg.as_encoded_bytes());
        }
        for (name, value) in cmd.get_envs() {
            let name = name.to_string_lossy();
            let value = value
                .map(|v| v.as_encoded_bytes().to_vec())
                .unwrap_or_default();
            self.input(&format!("${name} of `{label}`"), value);
        }
        let sampled = proc_sampler::run(cmd);
        let run = Run::from(sampled.output);
        self.run(label, &run);
        assert!(
            sampled.flow_reads > 0,
            "the sampler never read /proc/{}/cmdline and environ of `{label}` ({} samples)",
            sampled.pid,
            sampled.samples
        );
        for seen in sampled.seen {
            let (role, allowed) = match seen.role {
                Role::Flow => ("flow", &self.flow_env),
                Role::Descendant => ("a descendant of flow", &self.child_env),
            };
            let environ = proc_sampler::without_values(&seen.environ, allowed);
            let pid = seen.pid;
            let shown = String::from_utf8_lossy(&seen.cmdline).into_owned();
            let shown = shown.chars().take(80).collect::<String>();
            self.place(
                Kind::Cmdline,
                label,
                &format!("`{label}`: /proc/{pid}/cmdline of {role} ({shown})"),
                &seen.cmdline,
            );
            self.place(
                Kind::Environ,
                label,
                &format!("`{label}`: /proc/{pid}/environ of {role} ({shown})"),
                &environ,
            );
        }
        run
    }

    /// A control: `bytes`, which flow wrote into a place of `kind` and no
    /// input of the test holds; the scan fails unless some place of that
    /// kind holds them.
    pub fn control(&mut self, kind: Kind, what: &str, bytes: impl AsRef<[u8]>) -> &mut Self {
        self.controls.push(Control {
            kind,
            scope: None,
            what: what.into(),
            bytes: bytes.as_ref().to_vec(),
        });
        self
    }

    /// A control that must be found in a place of `kind` read for `scope`
    /// (a command's label, or the moment of [`SecretScan::tree_as_of`]).
    pub fn control_in(
        &mut self,
        kind: Kind,
        scope: &str,
        what: &str,
        bytes: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.control(kind, what, bytes);
        self.controls.last_mut().expect("just pushed").scope = Some(scope.into());
        self
    }

    /// Says that flow writes nothing of its own into places of `kind` in
    /// this test (`why`), so they have no control.
    pub fn without_control(&mut self, kind: Kind, why: &str) -> &mut Self {
        self.uncontrolled.push((kind, why.into()));
        self
    }

    /// How many places the scan holds.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// Whether any place holds `needle` in clear.
    pub fn sees(&self, needle: &str) -> bool {
        self.places
            .iter()
            .any(|p| contains(&p.bytes, needle.as_bytes()))
    }

    /// Panics naming each kind of place whose control was not found (the
    /// scan did not read it), each kind held with no control, and each
    /// control an input of the test holds.
    pub fn assert_controls(&self) {
        if self.controls_checked.load(Ordering::Relaxed) {
            return;
        }
        let mut problems = Vec::new();
        for c in &self.controls {
            let shown = String::from_utf8_lossy(&c.bytes);
            if c.bytes.len() < 8 {
                problems.push(format!(
                    "control {} (`{shown}`) is too short to prove anything",
                    c.what
                ));
            }
            for (label, input) in &self.inputs {
                if contains(input, &c.bytes) {
                    problems.push(format!(
                        "control {} (`{shown}`) is in the test's input {label}: finding it proves nothing",
                        c.what
                    ));
                }
            }
            let places: Vec<&Place> = self
                .places
                .iter()
                .filter(|p| p.kind == c.kind && c.scope.as_ref().is_none_or(|s| *s == p.scope))
                .collect();
            if !places.iter().any(|p| contains(&p.bytes, &c.bytes)) {
                let of = c
                    .scope
                    .as_ref()
                    .map(|s| format!(" of `{s}`"))
                    .unwrap_or_default();
                let listed: Vec<&str> = places.iter().take(6).map(|p| p.label.as_str()).collect();
                problems.push(format!(
                    "the scan read no {}{of}: control {} (`{shown}`) not found in any of {} places [{}]",
                    c.kind.name(),
                    c.what,
                    places.len(),
                    listed.join(", ")
                ));
            }
        }
        let mut kinds: Vec<Kind> = Vec::new();
        for p in &self.places {
            if p.kind != Kind::Other && !kinds.contains(&p.kind) {
                kinds.push(p.kind);
            }
        }
        for kind in kinds {
            let controlled = self.controls.iter().any(|c| c.kind == kind)
                || self.uncontrolled.iter().any(|(k, _)| *k == kind);
            if !controlled {
                let n = self.places.iter().filter(|p| p.kind == kind).count();
                problems.push(format!(
                    "the scan holds {n} places of {} and no control for them",
                    kind.name()
                ));
            }
        }
        assert!(
            problems.is_empty(),
            "the secret scan's controls failed:\n  - {}",
            problems.join("\n  - ")
        );
        self.controls_checked.store(true, Ordering::Relaxed);
    }

    /// Panics if a control is missing ([`SecretScan::assert_controls`]),
    /// then naming the form and place if `secret` shows anywhere.
    pub fn assert_clean(&self, secret: &str) {
        self.assert_controls();
        for (form, bytes) in forms(secret) {
            for place in &self.places {
                let text = &place.bytes;
                if let Some(at) = find(text, &bytes) {
                    let around =
                        &text[at.saturating_sub(300)..(at + bytes.len() + 100).min(text.len())];
                    panic!(
                        "the secret ({form}: {}) is in {} ({}):\n…{}…",
                        String::from_utf8_lossy(&bytes),
                        place.label,
                        place.kind.name(),
                        String::from_utf8_lossy(around)
                    );
                }
            }
        }
    }
}

/// The fingerprint flow keeps of the string `value` (a sensitive variable,
/// an output carrying a secret) under the key it made in `config_dir`:
/// `hmac-sha256:<key id>:<HMAC-SHA-256 of the value as JSON>`. Made of the
/// key flow generated, so no input of a test holds it.
pub fn fingerprint(config_dir: &Path, value: &str) -> String {
    let file = config_dir.join("fingerprint.key");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("flow made no fingerprint key {}: {e}", file.display()));
    let key = hex::decode(text.trim()).expect("the key is hex");
    let id = hmac_sha256(&key, b"flow fingerprint key id");
    let json = serde_json::Value::String(value.into()).to_string();
    format!(
        "hmac-sha256:{}:{}",
        &id[..8],
        hmac_sha256(&key, json.as_bytes())
    )
}

/// HMAC-SHA-256 (RFC 2104), hex.
fn hmac_sha256(key: &[u8], data: &[u8]) -> String {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(data)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
#[path = "secret_scan_tests.rs"]
mod tests;
