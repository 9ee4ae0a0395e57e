//! The file-input rule: a local file a step names is a path relative to the
//! workflow file's folder and stays inside it. An absolute path, a `..` that
//! climbs out, or a symbolic link that points out is refused, so a workflow
//! (or a value pasted into one) cannot make flow read, digest or send a file
//! from elsewhere on the machine (`~/.ssh`, `/etc`).

use std::path::{Component, Path, PathBuf};

/// `path` resolved against `workdir`, when it stays inside it; otherwise
/// why not, as one sentence naming the path.
pub(crate) fn inside_workdir(workdir: &Path, path: &str) -> Result<PathBuf, String> {
    let given = Path::new(path);
    if given.is_absolute() {
        return Err(format!(
            "`{path}` is an absolute path; files a step names are relative to the workflow's folder and stay inside it"
        ));
    }
    let mut depth: i32 = 0;
    for part in given.components() {
        match part {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => depth = -1,
        }
        if depth < 0 {
            return Err(format!(
                "`{path}` climbs out of the workflow's folder; files a step names stay inside it"
            ));
        }
    }
    let joined = workdir.join(given);
    // A link inside the folder may still point out of it.
    if let (Ok(real), Ok(root)) = (joined.canonicalize(), workdir.canonicalize())
        && !real.starts_with(&root)
    {
        return Err(format!(
            "`{path}` is a link to {}, outside the workflow's folder; files a step names stay inside it",
            real.display()
        ));
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_pass_and_paths_out_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("jobs")).unwrap();
        std::fs::write(dir.path().join("jobs/nccl.sbatch"), "#!/bin/bash\n").unwrap();
        assert_eq!(
            inside_workdir(dir.path(), "jobs/nccl.sbatch").unwrap(),
            dir.path().join("jobs/nccl.sbatch")
        );
        assert!(inside_workdir(dir.path(), "jobs/../jobs/nccl.sbatch").is_ok());
        let abs = inside_workdir(dir.path(), "/etc/passwd").unwrap_err();
        assert!(abs.contains("absolute"), "{abs}");
        let up = inside_workdir(dir.path(), "jobs/../../x.sbatch").unwrap_err();
        assert!(up.contains("climbs out"), "{up}");
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("jobs/link")).unwrap();
        let link = inside_workdir(dir.path(), "jobs/link").unwrap_err();
        assert!(link.contains("outside the workflow's folder"), "{link}");
    }
}
