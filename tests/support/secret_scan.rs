//! Scanning everything flow printed or wrote for a secret, in clear or in
//! any encoded form: base64 (standard and URL-safe, at each byte alignment
//! it can have inside longer text), hex, JSON-escaped, URL-encoded and
//! shell-quoted. A scan collects places (captured output, every file under
//! a folder, the command lines of running processes) and then fails naming
//! the form and the place of the first hit.

use std::path::Path;

use base64::Engine as _;

use super::Run;

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
    ] {
        if form != secret {
            out.push((name.into(), form.into_bytes()));
        }
    }
    out
}

/// The places to look in.
#[derive(Default)]
pub struct SecretScan {
    places: Vec<(String, Vec<u8>)>,
}

impl SecretScan {
    /// An empty scan.
    pub fn new() -> Self {
        SecretScan::default()
    }

    /// Text flow printed, named `label`.
    pub fn text(&mut self, label: &str, text: &str) -> &mut Self {
        self.places.push((label.into(), text.as_bytes().to_vec()));
        self
    }

    /// A run's stdout and stderr.
    pub fn run(&mut self, label: &str, run: &Run) -> &mut Self {
        self.text(&format!("{label} (stdout)"), &run.stdout);
        self.text(&format!("{label} (stderr)"), &run.stderr)
    }

    /// Every file under `dir`, except those `skip` says the user wrote.
    pub fn tree(&mut self, dir: &Path, skip: impl Fn(&Path) -> bool) -> &mut Self {
        for file in super::files_under(dir) {
            if skip(&file) {
                continue;
            }
            if let Ok(bytes) = std::fs::read(&file) {
                self.places.push((file.display().to_string(), bytes));
            }
        }
        self
    }

    /// The command line of every process running now.
    pub fn command_lines(&mut self) -> &mut Self {
        for (pid, line) in command_lines() {
            self.places.push((format!("/proc/{pid}/cmdline"), line));
        }
        self
    }

    /// How many places the scan holds.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// Whether any place holds `needle` in clear: the control that shows
    /// the scan read what it should (a name flow surely wrote).
    pub fn sees(&self, needle: &str) -> bool {
        self.places
            .iter()
            .any(|(_, b)| contains(b, needle.as_bytes()))
    }

    /// Panics naming the form and place if `secret` shows anywhere.
    pub fn assert_clean(&self, secret: &str) {
        for (form, bytes) in forms(secret) {
            for (place, text) in &self.places {
                if let Some(at) = find(text, &bytes) {
                    let around =
                        &text[at.saturating_sub(300)..(at + bytes.len() + 100).min(text.len())];
                    panic!(
                        "the secret ({form}: {}) is in {place}:\n…{}…",
                        String::from_utf8_lossy(&bytes),
                        String::from_utf8_lossy(around)
                    );
                }
            }
        }
    }
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

/// `(pid, argv joined by spaces)` of every process readable now.
pub fn command_lines() -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().into_string().ok()?;
            pid.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
            let mut line = std::fs::read(e.path().join("cmdline")).ok()?;
            line.iter_mut().filter(|b| **b == 0).for_each(|b| *b = b' ');
            Some((pid, line))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_is_found_and_others_are_not() {
        let secret = "hf_s3cret 'tok'";
        let mut scan = SecretScan::new();
        scan.text("plain", "nothing here");
        scan.assert_clean(secret);
        for (form, bytes) in forms(secret) {
            let mut hit = SecretScan::new();
            hit.text("t", &format!("x{}y", String::from_utf8_lossy(&bytes)));
            let caught = std::panic::catch_unwind(|| hit.assert_clean(secret));
            assert!(caught.is_err(), "{form} not caught");
        }
        let inside = base64::engine::general_purpose::STANDARD.encode(format!("ab{secret}cd"));
        let mut hit = SecretScan::new();
        hit.text("t", &inside);
        assert!(std::panic::catch_unwind(|| hit.assert_clean(secret)).is_err());
    }
}
