//! The file-input rule: a local file a step names is a path relative to the
//! workflow file's folder and stays inside it, unless `[workflow]
//! allow_paths` opens the folder it is in. The path is resolved as the
//! system would open it (links followed, `..` applied to the real folder)
//! before it is checked, so neither an absolute path, a `..` that climbs out,
//! nor a link that points out can make flow read, digest or send a file from
//! elsewhere on the machine (`~/.ssh`, `/etc`).

use std::ops::Deref;
use std::path::{Component, Path, PathBuf};

/// The workflow's folder, which relative paths resolve against, and the
/// folders outside it that `[workflow] allow_paths` opens to the files a
/// step names. Derefs to the folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workdir {
    dir: PathBuf,
    /// `allow_paths` as written (relative to `dir`, or absolute).
    allowed: Vec<PathBuf>,
}

impl Workdir {
    /// The folder `dir`, with nothing outside it allowed.
    pub fn new(dir: impl Into<PathBuf>) -> Workdir {
        Workdir {
            dir: dir.into(),
            allowed: Vec::new(),
        }
    }

    /// The same folder, with the folders of `allow_paths` (as written in the
    /// workflow) allowed too.
    pub fn allowing(mut self, allow_paths: impl IntoIterator<Item = String>) -> Workdir {
        self.allowed
            .extend(allow_paths.into_iter().map(PathBuf::from));
        self
    }

    /// The same rule, with relative paths resolving against `dir` instead
    /// (a template file's folder, for the paths the template names): the
    /// folders allowed stay those of the workflow.
    pub fn rebased(&self, dir: &Path) -> Workdir {
        let root = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        let mut allowed = vec![root.clone()];
        allowed.extend(self.allowed.iter().map(|a| root.join(a)));
        Workdir {
            dir: dir.to_path_buf(),
            allowed,
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `path` (as a step names it) joined to the folder, when it resolves
    /// inside the folder or a folder `allow_paths` opens; otherwise one
    /// sentence naming the path, the folder it escapes and the option that
    /// would allow it.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let joined = self.dir.join(path);
        self.admit(path, &joined)?;
        Ok(joined)
    }

    /// Whether the file or folder at `full` (the folder joined with a path,
    /// or an absolute path), shown as `shown`, may be read: as
    /// [`Workdir::resolve`] judges it.
    pub fn admit(&self, shown: &str, full: &Path) -> Result<(), String> {
        let real = real_path(full);
        let root = real_path(&self.dir);
        if real.starts_with(&root)
            || self
                .allowed
                .iter()
                .any(|a| real.starts_with(real_path(&self.dir.join(a))))
        {
            return Ok(());
        }
        let how = if Path::new(shown).is_absolute() && real == Path::new(shown) {
            String::new()
        } else {
            format!("; it resolves to {}", from(&root, &real).display())
        };
        Err(format!(
            "`{shown}` is outside the workflow's folder; to use it, add `allow_paths = [\"{}\"]` to [workflow] (the folder is {}{how})",
            suggestion(shown, &real).display(),
            self.dir.display(),
        ))
    }
}

impl Deref for Workdir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.dir
    }
}

impl AsRef<Path> for Workdir {
    fn as_ref(&self) -> &Path {
        &self.dir
    }
}

impl From<PathBuf> for Workdir {
    fn from(dir: PathBuf) -> Workdir {
        Workdir::new(dir)
    }
}

impl From<&str> for Workdir {
    fn from(dir: &str) -> Workdir {
        Workdir::new(dir)
    }
}

impl From<&Path> for Workdir {
    fn from(dir: &Path) -> Workdir {
        Workdir::new(dir)
    }
}

/// `path` made absolute and resolved as the system would open it: every
/// part that exists with its links followed, `..` applied to the real
/// folder; the parts that do not exist yet are appended as written.
fn real_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    let mut exists = true;
    for part in absolute.components() {
        match part {
            Component::Prefix(_) | Component::RootDir => out.push(part),
            Component::CurDir => {}
            // `out` is already real while it exists: its parent is the
            // real parent.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if exists {
                    match out.canonicalize() {
                        Ok(real) => out = real,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    out
}

/// `real` as seen from the folder `root`: `../shared/x.yaml` when they
/// share more than `/`, else `real` itself.
fn from(root: &Path, real: &Path) -> PathBuf {
    let common = root
        .components()
        .zip(real.components())
        .take_while(|(a, b)| a == b)
        .count();
    if common <= 1 {
        return real.to_path_buf();
    }
    let mut out = PathBuf::new();
    for _ in common..root.components().count() {
        out.push("..");
    }
    out.extend(real.components().skip(common));
    out
}

/// What to add to `allow_paths` for `path`, which resolves to `real`: the
/// folder as written (a folder named, else the folder of the file), or the
/// real folder when only a link leads out.
fn suggestion(path: &str, real: &Path) -> PathBuf {
    let written = Path::new(path);
    let climbs = written.is_absolute()
        || written
            .components()
            .try_fold(0i32, |depth, part| {
                let depth = match part {
                    Component::ParentDir => depth - 1,
                    Component::Normal(_) => depth + 1,
                    _ => depth,
                };
                (depth >= 0).then_some(depth)
            })
            .is_none();
    let base = if climbs { written } else { real };
    if real.is_dir() {
        return base.to_path_buf();
    }
    match base.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workflow folder `wf` with `jobs/nccl.sbatch`, beside a `shared`
    /// folder with `x.yaml`.
    fn layout() -> (tempfile::TempDir, Workdir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("wf/jobs")).unwrap();
        std::fs::create_dir_all(dir.path().join("shared")).unwrap();
        std::fs::write(dir.path().join("wf/jobs/nccl.sbatch"), "#!/bin/bash\n").unwrap();
        std::fs::write(dir.path().join("shared/x.yaml"), "a: 1\n").unwrap();
        let wd = Workdir::new(dir.path().join("wf"));
        (dir, wd)
    }

    #[test]
    fn paths_inside_pass_and_paths_out_are_refused() {
        let (dir, wd) = layout();
        assert_eq!(
            wd.resolve("jobs/nccl.sbatch").unwrap(),
            dir.path().join("wf/jobs/nccl.sbatch")
        );
        assert!(wd.resolve("jobs/../jobs/nccl.sbatch").is_ok());
        assert!(wd.resolve("jobs/not-yet.sbatch").is_ok());
        let abs = wd.resolve("/etc/passwd").unwrap_err();
        assert!(
            abs.starts_with("`/etc/passwd` is outside the workflow's folder; to use it, add `allow_paths = [\"/etc\"]` to [workflow] (the folder is /"),
            "{abs}"
        );
        assert!(!abs.contains("resolves"), "{abs}");
        let up = wd.resolve("jobs/../../shared/x.yaml").unwrap_err();
        assert!(up.ends_with("wf; it resolves to ../shared/x.yaml)"), "{up}");
        assert!(up.contains("allow_paths = [\"jobs/../../shared\"]"), "{up}");
        let missing = wd.resolve("../nope/x.yaml").unwrap_err();
        assert!(missing.contains("allow_paths = [\"../nope\"]"), "{missing}");
    }

    #[test]
    fn a_link_is_judged_by_where_it_leads() {
        let (dir, wd) = layout();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("wf/jobs/link")).unwrap();
        let link = wd.resolve("jobs/link").unwrap_err();
        assert!(
            link.ends_with("wf; it resolves to /etc/hostname)"),
            "{link}"
        );
        assert!(link.contains("allow_paths = [\"/etc\"]"), "{link}");
        // A link to a folder outside, then `..` out of that folder: `..`
        // applies to the real folder, as the system does.
        std::os::unix::fs::symlink(dir.path().join("shared"), dir.path().join("wf/out")).unwrap();
        assert!(wd.resolve("out/x.yaml").is_err());
        assert!(wd.resolve("out/../shared/x.yaml").is_err());
        assert!(wd.resolve("jobs/../out/../wf/jobs/nccl.sbatch").is_ok());
        // A link that stays inside is fine.
        std::os::unix::fs::symlink("jobs", dir.path().join("wf/alias")).unwrap();
        assert!(wd.resolve("alias/nccl.sbatch").is_ok());
    }

    #[test]
    fn allow_paths_open_a_folder_and_only_that_folder() {
        let (dir, wd) = layout();
        let wd = wd.allowing(["../shared".to_string()]);
        assert!(wd.resolve("../shared/x.yaml").is_ok());
        assert!(wd.resolve("../shared").is_ok());
        std::os::unix::fs::symlink(dir.path().join("shared/x.yaml"), dir.path().join("wf/x"))
            .unwrap();
        assert!(wd.resolve("x").is_ok());
        assert!(wd.resolve("../shared-not/x.yaml").is_err());
        assert!(wd.resolve("/etc/passwd").is_err());
        let abs = Workdir::new(dir.path().join("wf")).allowing([dir
            .path()
            .join("shared")
            .display()
            .to_string()]);
        assert!(
            abs.resolve(&dir.path().join("shared/x.yaml").display().to_string())
                .is_ok()
        );
    }

    #[test]
    fn a_rebased_folder_keeps_the_workflows_rule() {
        let (dir, wd) = layout();
        let wd = wd.allowing(["../shared".to_string()]);
        let jobs = wd.rebased(&dir.path().join("wf/jobs"));
        assert_eq!(
            jobs.resolve("nccl.sbatch").unwrap(),
            dir.path().join("wf/jobs/nccl.sbatch")
        );
        assert!(jobs.resolve("../../shared/x.yaml").is_ok());
        assert!(jobs.resolve("../../x.yaml").is_err());
    }

    #[test]
    fn a_relative_folder_resolves_against_the_current_one() {
        let wd = Workdir::new(".");
        assert!(wd.resolve("Cargo.toml").is_ok());
        assert!(wd.resolve("../Cargo.toml").is_err());
    }
}
