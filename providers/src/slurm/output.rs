//! Following a job's output files while it runs: each poll reads what was
//! added since the last one (from the file, or over SSH with `tail -c`),
//! hands whole lines to the step's log (what `flow logs -f` shows), and
//! keeps the text for `success_pattern` and `capture`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

use super::remote::Remote;
use crate::contract::Reporter;

/// At most this much is read from one file in one poll.
const CHUNK: u64 = 4 << 20;

/// What was read of one file so far.
#[derive(Debug, Default)]
struct Followed {
    offset: u64,
    /// The start of a line not yet ended.
    partial: String,
}

/// The job's output files, followed.
#[derive(Debug, Default)]
pub(crate) struct Output {
    files: BTreeMap<String, Followed>,
    /// Everything read, across files, in the order it was read.
    text: String,
}

impl Output {
    /// Reads what the files at `paths` gained since the last call; `label`
    /// prefixes each line when a job has several files (array tasks).
    pub async fn poll(
        &mut self,
        remote: &Remote,
        paths: &[(String, String)],
        reporter: &dyn Reporter,
    ) {
        let several = paths.len() > 1;
        for (label, path) in paths {
            let followed = self.files.entry(path.clone()).or_default();
            let Some(bytes) = read_from(remote, path, followed.offset).await else {
                continue;
            };
            followed.offset += bytes.len() as u64;
            followed.partial.push_str(&String::from_utf8_lossy(&bytes));
            while let Some(end) = followed.partial.find('\n') {
                let line: String = followed.partial.drain(..=end).collect();
                let line = line.trim_end_matches(['\n', '\r']);
                if several {
                    reporter.log(&format!("[{label}] {line}"));
                } else {
                    reporter.log(line);
                }
                self.text.push_str(line);
                self.text.push('\n');
            }
        }
    }

    /// Ends the lines left open once the job has finished.
    pub fn close(&mut self, reporter: &dyn Reporter) {
        for followed in self.files.values_mut() {
            let rest = std::mem::take(&mut followed.partial);
            if !rest.is_empty() {
                reporter.log(&rest);
                self.text.push_str(&rest);
                self.text.push('\n');
            }
        }
    }

    /// Everything read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The last `n` lines read, joined with ` | `.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }
}

/// The bytes of `path` from `offset` on (at most [`CHUNK`]), or `None` when
/// the file is not there (yet) or cannot be read.
async fn read_from(remote: &Remote, path: &str, offset: u64) -> Option<Vec<u8>> {
    match remote {
        Remote::Local { .. } => {
            let path = path.to_string();
            tokio::task::spawn_blocking(move || {
                let mut file = std::fs::File::open(&path).ok()?;
                file.seek(SeekFrom::Start(offset)).ok()?;
                let mut bytes = Vec::new();
                file.take(CHUNK).read_to_end(&mut bytes).ok()?;
                Some(bytes)
            })
            .await
            .ok()
            .flatten()
        }
        Remote::Ssh(_) => {
            // `tail -c +N` counts from 1; `head -c` bounds one poll's read.
            let from = format!("+{}", offset + 1);
            let script = format!("tail -c {from} -- \"$1\" 2>/dev/null | head -c {CHUNK}");
            let ran = remote
                .run(&["sh", "-c", &script, "flow-tail", path], None)
                .await
                .ok()?;
            ran.ok().then(|| ran.stdout.into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RecordingReporter;

    #[tokio::test]
    async fn lines_are_logged_once_and_partial_lines_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slurm-1.out");
        let remote = Remote::Local {
            cwd: dir.path().to_path_buf(),
        };
        let reporter = RecordingReporter::default();
        let mut out = Output::default();
        let paths = [("1".to_string(), path.display().to_string())];
        out.poll(&remote, &paths, &reporter).await; // not there yet
        std::fs::write(&path, "# nThread 1\n    8388608  busbw 12").unwrap();
        out.poll(&remote, &paths, &reporter).await;
        std::fs::write(
            &path,
            "# nThread 1\n    8388608  busbw 12.5\nAvg bus bandwidth : 12.5\n",
        )
        .unwrap();
        out.poll(&remote, &paths, &reporter).await;
        out.close(&reporter);
        assert_eq!(
            out.text(),
            "# nThread 1\n    8388608  busbw 12.5\nAvg bus bandwidth : 12.5\n"
        );
        assert_eq!(reporter.logs().len(), 3);
        assert_eq!(out.tail(1), "Avg bus bandwidth : 12.5");
    }
}
