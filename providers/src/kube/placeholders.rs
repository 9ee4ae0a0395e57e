//! `${NAME}` placeholders in manifest files and inline manifests, filled
//! from the step's `values`: `${NAME}` is replaced when `values` has
//! `NAME`; any other `${...}` stays as written (shell scripts inside
//! manifests keep theirs); `$${` writes `${`. A `${vars.X}` or
//! `${steps.S.outputs.K}` inside a file is an error that says to pass it
//! through `values`, where flow resolves it (and adds the dependency).
//! Each value enters as a YAML scalar ([`crate::yaml_fill`]).

use std::collections::BTreeMap;

use super::documents::ManifestError;
use crate::yaml_fill::{self, Hole};

/// `text` with `${NAME}` placeholders from `values` filled in, each value
/// as a YAML scalar in its place (`source` names the text in errors).
pub fn fill(
    source: &str,
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, ManifestError> {
    let mut holes = Vec::new();
    let mut i = 0;
    while let Some(found) = text[i..].find('$') {
        let at = i + found;
        let tail = &text[at..];
        if tail.starts_with("$${") {
            holes.push(Hole {
                range: at..at + 3,
                name: "$${",
                value: "${",
            });
            i = at + 3;
            continue;
        }
        if let Some(body) = tail.strip_prefix("${")
            && let Some(end) = body.find('}')
        {
            let name = &body[..end];
            let range = at..at + 2 + end + 1;
            if let Some(v) = values.get(name) {
                holes.push(Hole {
                    name: &text[range.clone()],
                    range: range.clone(),
                    value: v,
                });
                i = range.end;
                continue;
            }
            if name.starts_with("vars.") || name.starts_with("steps.") {
                let line = text[..at].lines().count().max(1);
                let key = name.rsplit('.').next().unwrap_or(name);
                return Err(ManifestError::ReferenceInFile {
                    file: source.to_string(),
                    line,
                    name: name.to_string(),
                    key: key.to_string(),
                });
            }
        }
        i = at + 1;
    }
    yaml_fill::fill(text, &holes).map_err(|m| ManifestError::Misplaced {
        file: source.to_string(),
        line: m.line,
        message: m.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_fill_from_values_others_stay() {
        let v = vals(&[("IMAGE", "repo/fsdp:1"), ("N", "2")]);
        let out = fill(
            "f",
            "image: ${IMAGE}\nargs: [\"--nodes=${N}\", \"${HOME}\", \"$${IMAGE}\", \"$5\"]",
            &v,
        )
        .unwrap();
        assert_eq!(
            out,
            "image: repo/fsdp:1\nargs: [\"--nodes=2\", \"${HOME}\", \"${IMAGE}\", \"$5\"]"
        );
        let err = fill("job.yaml", "a: 1\nimage: ${vars.image}\n", &v)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("job.yaml:2:"), "{err}");
        assert!(err.contains("add `image = \"${vars.image}\"`"), "{err}");
    }
}
