//! `substitute`: the placeholders of a published file (an eksctl config, a
//! manifest, a CloudFormation template, a ParallelCluster config) filled as
//! the runbook's `sed` and `envsubst` would, without copying the file.
//!
//! Each key of the table names one token, written as the file writes it,
//! and only that token changes:
//! - `PLACEHOLDER_X` replaces the word `PLACEHOLDER_X` (not `PLACEHOLDER_XY`),
//!   and `$PLACEHOLDER_X` / `${PLACEHOLDER_X}` whole;
//! - `<x>` replaces the text `<x>` (`<account>.dkr.ecr.<region>…`);
//! - any other name `X` replaces `$X` (not `$XY`) and `${X}`, never the bare
//!   word: `MAX_NODES = "2"` fills `$MAX_NODES` and leaves an `env:` entry
//!   named `MAX_NODES` alone, as `envsubst` does; a file's own `$PATH` or
//!   `$LD_LIBRARY_PATH` stays as written unless the table names it.
//!
//! The text is scanned once, so a value that holds another token is not
//! filled again. [`leftovers`] finds what still looks like a placeholder,
//! with its line and column, for validate.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::contract::{InputSpec, InputType, Problem, ProviderError, Values};

/// The name of the input.
pub const INPUT: &str = "substitute";

/// The input that names the `$NAME` tokens a file must not keep unfilled.
pub const REQUIRED: &str = "required_placeholders";

/// The `substitute` input's schema entry; `example` shows a key of the
/// step's files.
pub fn input_spec(example: &'static str) -> InputSpec {
    InputSpec::optional(INPUT, InputType::Map(Box::new(InputType::String)), example)
}

/// The `required_placeholders` input's schema entry.
pub fn required_spec() -> InputSpec {
    InputSpec::optional(
        REQUIRED,
        InputType::List(Box::new(InputType::String)),
        "Names whose `$NAME` / `${NAME}` must be filled by `substitute` (e.g. [\"MAX_NODES\", \"IMAGE_URI\"]): one left in a file is an error at its line and column",
    )
}

/// The tokens to fill and their values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Substitutions {
    /// `(key, value)`, longest key first, so `$MAX_NODES_PER_GROUP` is not
    /// taken for `$MAX_NODES`.
    entries: Vec<(String, String)>,
    /// Names whose `$NAME` must not be left in a file.
    required: Vec<String>,
}

impl Substitutions {
    /// The step's `substitute` table (absent: nothing to fill). Numbers and
    /// booleans are written as TOML would show them.
    pub fn from_values(values: &Values) -> Result<Substitutions, ProviderError> {
        let map = match values.get(INPUT) {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => text_table(m),
            Some(_) => {
                return Err(ProviderError::bad_input(
                    "`substitute` must be a table of placeholders and their values",
                ));
            }
        };
        let required = match values.get(REQUIRED) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(names)) => names
                .iter()
                .map(|n| n.as_str().map(|n| n.trim_start_matches('$').to_string()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ProviderError::bad_input("`required_placeholders` must be a list of names")
                })?,
            Some(_) => {
                return Err(ProviderError::bad_input(
                    "`required_placeholders` must be a list of names",
                ));
            }
        };
        Ok(Substitutions::from_map(map).requiring(required))
    }

    /// The same, with `names` required (see [`REQUIRED`]).
    pub fn requiring(mut self, names: Vec<String>) -> Substitutions {
        self.required = names;
        self
    }

    /// From `(key, value)` pairs.
    pub fn from_map(map: BTreeMap<String, String>) -> Substitutions {
        let mut entries: Vec<(String, String)> =
            map.into_iter().filter(|(k, _)| !k.is_empty()).collect();
        entries.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        Substitutions {
            entries,
            required: Vec::new(),
        }
    }

    /// Whether there is nothing to fill.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `text` with every named token filled.
    pub fn apply(&self, text: &str) -> String {
        if self.entries.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            match self.match_at(text, i) {
                Some((len, value)) => {
                    out.push_str(value);
                    i += len;
                }
                None => {
                    let c = text[i..].chars().next().expect("i is on a char boundary");
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        out
    }

    /// `text`, a YAML file, with every named token filled, each value as a
    /// YAML scalar in its place ([`crate::yaml_fill`]): a value never adds
    /// keys or items. What cannot be placed says its line.
    pub(crate) fn apply_yaml(&self, text: &str) -> Result<String, crate::yaml_fill::Misfit> {
        let mut holes = Vec::new();
        let mut i = 0;
        while i < text.len() {
            match self.match_at(text, i) {
                Some((len, value)) => {
                    holes.push(crate::yaml_fill::Hole {
                        range: i..i + len,
                        name: &text[i..i + len],
                        value,
                    });
                    i += len;
                }
                None => i += text[i..].chars().next().map_or(1, char::len_utf8),
            }
        }
        crate::yaml_fill::fill(text, &holes)
    }

    /// The keys that match nothing in any of `texts` (a misspelt key).
    pub fn unused<'a>(&'a self, texts: &[&str]) -> Vec<&'a str> {
        self.entries
            .iter()
            .filter(|(key, _)| {
                !texts
                    .iter()
                    .any(|t| t.char_indices().any(|(i, _)| form_len(t, i, key).is_some()))
            })
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// The token matched at byte `i` of `text`: its length and value.
    fn match_at(&self, text: &str, i: usize) -> Option<(usize, &str)> {
        self.entries
            .iter()
            .find_map(|(key, value)| form_len(text, i, key).map(|len| (len, value.as_str())))
    }
}

/// A table of values as text: strings as they are, numbers and booleans
/// as JSON writes them (`2`, `true`).
pub(crate) fn text_table(table: &serde_json::Map<String, Value>) -> BTreeMap<String, String> {
    table
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// Whether `c` continues a name.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The length of the form of `key` that starts at byte `i` of `text`, if one does.
fn form_len(text: &str, i: usize, key: &str) -> Option<usize> {
    let rest = &text[i..];
    if key.starts_with('<') {
        return rest.starts_with(key).then_some(key.len());
    }
    let braced = format!("${{{key}}}");
    if rest.starts_with(&braced) {
        return Some(braced.len());
    }
    let word_ends = |len: usize| !rest[len..].chars().next().is_some_and(is_word);
    if let Some(after) = rest.strip_prefix('$')
        && after.starts_with(key)
        && word_ends(1 + key.len())
    {
        return Some(1 + key.len());
    }
    let word_starts = !text[..i]
        .chars()
        .next_back()
        .is_some_and(|c| is_word(c) || c == '$');
    (key.starts_with("PLACEHOLDER_")
        && rest.starts_with(key)
        && word_starts
        && word_ends(key.len()))
    .then_some(key.len())
}

/// Something in a file that still looks like a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The token as written.
    pub token: String,
    /// Its line, from 1.
    pub line: usize,
    /// Its column (in characters), from 1.
    pub column: usize,
}

impl Leftover {
    /// `file:line:column: TOKEN has no value`, with the `substitute` entry
    /// to add as the help.
    pub fn message(&self, file: &str) -> (String, String) {
        (
            format!(
                "{file}:{}:{}: the placeholder `{}` has no value",
                self.line, self.column, self.token
            ),
            format!(
                "add it to the step's `substitute`: {} = \"…\"",
                if self.token.starts_with('<') {
                    format!("\"{}\"", self.token)
                } else {
                    // `$X` and `${X}` are filled by the key `X`.
                    self.token
                        .trim_start_matches('$')
                        .trim_start_matches('{')
                        .trim_end_matches('}')
                        .to_string()
                }
            ),
        )
    }
}

/// What still looks like a placeholder in `text` (after substitution): a
/// `PLACEHOLDER_…` word anywhere, and a `<lowercase>` token on an
/// `image:` line (`<account>.dkr.ecr.<region>.amazonaws.com/<image>:<tag>`),
/// plus `$NAME` / `${NAME}` for each name in `required`.
pub fn leftovers(text: &str, required: &[String]) -> Vec<Leftover> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let column = |byte: usize| line[..byte].chars().count() + 1;
        let mut push = |byte: usize, token: &str| {
            found.push(Leftover {
                token: token.to_string(),
                line: n + 1,
                column: column(byte),
            })
        };
        for (i, _) in line.match_indices("PLACEHOLDER_") {
            if line[..i].chars().next_back().is_some_and(is_word) {
                continue;
            }
            let len = line[i..]
                .find(|c: char| !is_word(c))
                .unwrap_or(line.len() - i);
            push(i, &line[i..i + len]);
        }
        if line
            .trim_start()
            .trim_start_matches("- ")
            .starts_with("image:")
        {
            let mut from = 0;
            while let Some(open) = line[from..].find('<').map(|o| o + from) {
                let Some(close) = line[open..].find('>').map(|c| c + open) else {
                    break;
                };
                let inner = &line[open + 1..close];
                if !inner.is_empty()
                    && inner.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
                    })
                {
                    push(open, &line[open..=close]);
                }
                from = close + 1;
            }
        }
        for name in required {
            for (i, _) in line.match_indices('$') {
                if let Some(len) = form_len(line, i, name) {
                    push(i, &line[i..i + len]);
                }
            }
        }
    }
    found
}

/// The problems of the local files `paths` (inside `workdir`) that input
/// `input` names, read here: see [`check_texts`]. URLs, and files that
/// cannot be read, are left to the step's other checks.
pub fn check_files(
    input: &str,
    workdir: &crate::Workdir,
    paths: &[&str],
    subs: &Substitutions,
) -> Vec<Problem> {
    let texts: Vec<(&str, String)> = paths
        .iter()
        .filter(|p| !p.starts_with("http://") && !p.starts_with("https://"))
        .filter_map(|p| {
            let full = workdir.resolve(p).ok()?;
            Some((*p, std::fs::read_to_string(full).ok()?))
        })
        .collect();
    let texts: Vec<(&str, &str)> = texts.iter().map(|(p, t)| (*p, t.as_str())).collect();
    check_texts(input, &texts, subs)
}

/// The problems of files input `input` names, given as `(path, text as
/// read)`, once filled with `subs`: each placeholder left, at its file,
/// line and column, and each key of `subs` that matches nothing in any of
/// them (a misspelt key).
pub fn check_texts(input: &str, texts: &[(&str, &str)], subs: &Substitutions) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (path, text) in texts {
        for left in leftovers(&subs.apply(text), &subs.required) {
            let (message, help) = left.message(path);
            problems.push(Problem::at(input, message).with_help(help));
        }
    }
    let raw: Vec<&str> = texts.iter().map(|(_, t)| *t).collect();
    if !raw.is_empty() {
        for key in subs.unused(&raw) {
            problems.push(
                Problem::at_path(&[INPUT, key], format!(
                    "`{key}` matches nothing in {}",
                    texts.iter().map(|(p, _)| format!("`{p}`")).collect::<Vec<_>>().join(", ")
                ))
                .on_key()
                .with_help(if key.starts_with("PLACEHOLDER_") || key.starts_with('<') {
                    "a key is the token exactly as the file writes it: check its spelling".to_string()
                } else {
                    format!("`{key}` fills `${key}` and `${{{key}}}` in the file (never the bare word): check its spelling")
                }),
            );
        }
    }
    problems
}

/// The step's `substitute` when its value is known: `None` while a value
/// in it is known only after apply (its checks wait for apply), an error
/// when it is not a table.
pub fn known_in(
    inputs: &[(String, crate::contract::InputValue)],
) -> Option<Result<Substitutions, ProviderError>> {
    let mut values = Values::new();
    for key in [INPUT, REQUIRED] {
        match inputs.iter().find(|(k, _)| k == key) {
            None => {}
            Some((_, crate::contract::InputValue::Known(v))) => {
                values.insert(key.to_string(), v.clone());
            }
            Some(_) => return None,
        }
    }
    Some(Substitutions::from_values(&values))
}

/// The digest of the local files named by input `key`, each read with its
/// tokens filled: what "changed?" compares, so an edit of the file and a
/// new value of a token it uses are changes, and a value no file uses is
/// not. `None` as [`crate::local_digest::files_digest`] gives it.
pub fn digest_of_input(values: &Values, key: &str, workdir: &crate::Workdir) -> Option<String> {
    let subs = Substitutions::from_values(values).ok()?;
    let paths = crate::local_digest::paths_of(values, key);
    crate::local_digest::files_digest_with(workdir, paths, |text| subs.apply(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(pairs: &[(&str, &str)]) -> Substitutions {
        Substitutions::from_map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// The runbook's published files (tests/fixtures/upstream/) with the
    /// values tests/fixtures/upstream/runbook.toml gives: the YAML-aware
    /// fill gives exactly the bytes a plain paste gives.
    #[test]
    fn the_published_files_fill_byte_for_byte_as_before() {
        let upstream =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream");
        let cases: &[(&str, &[(&str, &str)])] = &[
            (
                "eks-p4de-odcr.yaml",
                &[
                    ("PLACEHOLDER_AWS_REGION", "us-west-2"),
                    ("PLACEHOLDER_AZ_1", "us-west-2a"),
                    ("PLACEHOLDER_AZ_2", "us-west-2b"),
                    (
                        "PLACEHOLDER_CAPACITY_RESERVATION_ID",
                        "cr-0123456789abcdef0",
                    ),
                ],
            ),
            (
                "nccl-tests.yaml",
                &[(
                    "<account>.dkr.ecr.<region>.amazonaws.com/<image>:<tag>",
                    "111122223333.dkr.ecr.us-west-2.amazonaws.com/runbook:nccl",
                )],
            ),
            (
                "fsdp.yaml-template",
                &[
                    (
                        "IMAGE_URI",
                        "111122223333.dkr.ecr.us-west-2.amazonaws.com/runbook:fsdp",
                    ),
                    ("MAX_NODES", "2"),
                    ("MIN_NODES", "1"),
                    ("GPU_PER_NODE", "8"),
                    ("EFA_PER_NODE", "4"),
                    ("HF_TOKEN", "hf_not_a_real_token_0123456789"),
                ],
            ),
        ];
        for (file, pairs) in cases {
            let text = std::fs::read_to_string(upstream.join(file)).unwrap();
            let s = subs(pairs);
            let pasted = s.apply(&text);
            assert_ne!(pasted, text, "{file}: nothing was filled");
            assert_eq!(s.apply_yaml(&text).unwrap(), pasted, "{file}");
        }
    }

    /// An eksctl config's tokens filled as YAML: an ordinary value gives
    /// the bytes `apply` gives, and one that would add a key is one string.
    #[test]
    fn yaml_files_take_each_value_as_a_scalar() {
        let config = "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\nmetadata:\n  name: PLACEHOLDER_NAME\n  region: PLACEHOLDER_AWS_REGION\n";
        let plain = subs(&[
            ("PLACEHOLDER_NAME", "p4d"),
            ("PLACEHOLDER_AWS_REGION", "us-west-2"),
        ]);
        assert_eq!(plain.apply_yaml(config).unwrap(), plain.apply(config));
        let evil = subs(&[
            ("PLACEHOLDER_NAME", "p4d\n  tags: {owner: attacker}"),
            ("PLACEHOLDER_AWS_REGION", "us-west-2"),
        ]);
        let filled = evil.apply_yaml(config).unwrap();
        let parsed: Value = serde_saphyr::from_str(&filled).unwrap();
        assert_eq!(parsed["metadata"]["name"], "p4d\n  tags: {owner: attacker}");
        assert!(parsed["metadata"].get("tags").is_none(), "{filled}");
    }

    #[test]
    fn exactly_the_named_tokens_change_in_each_form() {
        let s = subs(&[
            ("PLACEHOLDER_AWS_REGION", "us-west-2"),
            ("<account>", "111122223333"),
            ("<region>", "us-west-2"),
            ("MAX_NODES", "2"),
            ("IMAGE_URI", "repo/fsdp:1"),
            ("GPU_PER_NODE", "8"),
        ]);
        let text = "region: PLACEHOLDER_AWS_REGION\n\
                    zone: PLACEHOLDER_AWS_REGIONa PLACEHOLDER_AWS_REGION_2\n\
                    image: <account>.dkr.ecr.<region>.amazonaws.com/<image>:<tag>\n\
                    args: --nnodes $MAX_NODES --nproc ${GPU_PER_NODE} $MAX_NODES_X\n\
                    image2: ${IMAGE_URI}\n\
                    env: [{name: MAX_NODES, value: \"$PATH:$LD_LIBRARY_PATH\"}]\n";
        let out = s.apply(text);
        assert_eq!(
            out,
            "region: us-west-2\n\
             zone: PLACEHOLDER_AWS_REGIONa PLACEHOLDER_AWS_REGION_2\n\
             image: 111122223333.dkr.ecr.us-west-2.amazonaws.com/<image>:<tag>\n\
             args: --nnodes 2 --nproc 8 $MAX_NODES_X\n\
             image2: repo/fsdp:1\n\
             env: [{name: MAX_NODES, value: \"$PATH:$LD_LIBRARY_PATH\"}]\n"
        );
        // One pass: a value holding a token is not filled again.
        let s = subs(&[("A", "$B"), ("B", "x")]);
        assert_eq!(s.apply("$A ${B}"), "$B x");
        // The longer name wins where both match.
        let s = subs(&[("MAX", "1"), ("MAX_NODES", "2")]);
        assert_eq!(s.apply("$MAX_NODES $MAX"), "2 1");
        // PLACEHOLDER_ keys fill their $ forms too; non-ASCII text passes.
        let s = subs(&[("PLACEHOLDER_X", "v")]);
        assert_eq!(s.apply("é ${PLACEHOLDER_X} $PLACEHOLDER_X"), "é v v");
    }

    #[test]
    fn keys_that_match_nothing_are_named() {
        let s = subs(&[
            ("PLACEHOLDER_AZ_1", "a"),
            ("PLACEHOLDER_AZ1", "b"),
            ("N", "1"),
        ]);
        assert_eq!(
            s.unused(&["zone: PLACEHOLDER_AZ_1\n", "n: $N"]),
            vec!["PLACEHOLDER_AZ1"]
        );
    }

    #[test]
    fn required_names_left_unfilled_are_problems_at_their_place() {
        let values: Values = serde_json::from_value(serde_json::json!({
            "substitute": {"MAX_NODES": "2"},
            "required_placeholders": ["MAX_NODES", "$GPU_PER_NODE", "IMAGE_URI"],
        }))
        .unwrap();
        let subs = Substitutions::from_values(&values).unwrap();
        let text = "replicas: $MAX_NODES\nlimits: {gpu: $GPU_PER_NODE}\nenv: $PATH\n";
        let problems = check_texts("manifests", &[("fsdp.yaml-template", text)], &subs);
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages,
            ["fsdp.yaml-template:2:15: the placeholder `$GPU_PER_NODE` has no value"]
        );
        assert_eq!(
            problems[0].help.as_deref(),
            Some("add it to the step's `substitute`: GPU_PER_NODE = \"…\"")
        );
        let bad: Values =
            serde_json::from_value(serde_json::json!({"required_placeholders": "MAX_NODES"}))
                .unwrap();
        assert!(Substitutions::from_values(&bad).is_err());
    }

    #[test]
    fn leftovers_have_their_line_and_column() {
        let text = "a: 1\n  zone: é PLACEHOLDER_AZ_1, xPLACEHOLDER_NO\n    - image: <account>.dkr.ecr.<region>.amazonaws.com/fsdp:<tag>\nnote: <not> an image\nargs: $MAX_NODES ${GPU} $PATH\n";
        let left = leftovers(text, &["MAX_NODES".into(), "GPU".into()]);
        let got: Vec<(String, usize, usize)> = left
            .iter()
            .map(|l| (l.token.clone(), l.line, l.column))
            .collect();
        assert_eq!(
            got,
            vec![
                ("PLACEHOLDER_AZ_1".into(), 2, 11),
                ("<account>".into(), 3, 14),
                ("<region>".into(), 3, 32),
                ("<tag>".into(), 3, 60),
                ("$MAX_NODES".into(), 5, 7),
                ("${GPU}".into(), 5, 18),
            ]
        );
        let (msg, help) = left[1].message("nccl-tests.yaml");
        assert_eq!(
            msg,
            "nccl-tests.yaml:3:14: the placeholder `<account>` has no value"
        );
        assert_eq!(
            help,
            "add it to the step's `substitute`: \"<account>\" = \"…\""
        );
    }
}
