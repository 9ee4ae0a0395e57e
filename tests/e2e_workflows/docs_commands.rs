//! Every command README.md and docs/workflows/*.md show, run as shown: the
//! command lines are read out of the pages' code blocks (fenced or
//! indented), so a command added to a page is run here without a word of
//! this file changing. AWS is the local cloud (moto and the emulated Batch
//! nodes, one per workflow a page names, as `scripts/local-aws` starts
//! them). What differs from a user at a terminal, and why:
//! - every `flow` command gets `--state-dir` (a scratch folder per page
//!   and workflow): the default, `.flow/` beside the workflow file, would
//!   be inside the repository; `apply` and `destroy` get `--auto-approve`
//!   (no one is there to type yes);
//! - the workflows the local cloud cannot run whole (EKS, HyperPod, the
//!   ParallelCluster CLI: each has its own end-to-end test) have their
//!   `apply` lines planned with the same arguments, and their `output` and
//!   `logs` lines must be refused only for want of an apply;
//! - a placeholder (`cr-…`) takes a value of its form, the user's data
//!   (`data_dir=/data/criteo`) the sample the repository holds, the region
//!   is that of the zone a command names, and the capacity reservation a
//!   command names is made in the local cloud first;
//! - `scripts/test` (the suite this test is part of) is not run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// A command line a page shows.
#[derive(Debug, Clone)]
struct Shown {
    /// `README.md:33`.
    place: String,
    /// The words, continuation lines joined, a trailing comment cut.
    words: Vec<String>,
}

impl Shown {
    fn text(&self) -> String {
        self.words.join(" ")
    }
}

/// The command lines of a Markdown page: lines in a fenced or indented code
/// block that start with `flow ` or `scripts/` (or `$ ` before one).
fn shown_commands(page: &str, markdown: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    // Inside a fence: whether it holds shell (no language, sh, console…).
    let mut fence: Option<bool> = None;
    let mut lines = markdown.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(
                    lang.trim(),
                    "" | "sh" | "bash" | "console" | "shell"
                )),
            };
            continue;
        }
        let code_block = match fence {
            Some(shell) => shell,
            None => line.starts_with("    "),
        };
        if !code_block {
            continue;
        }
        let code = line.trim().trim_start_matches("$ ");
        if !(code.starts_with("flow ") || code.starts_with("scripts/")) {
            continue;
        }
        let mut text = uncommented(code).to_string();
        while let Some(head) = text.strip_suffix('\\') {
            let next = lines.next().map_or("", |(_, l)| l);
            text = format!("{} {}", head.trim_end(), uncommented(next.trim()));
        }
        assert!(
            !text.contains(['"', '\'', '$', '|', ';', '&']),
            "{page}:{}: `{text}` needs a shell; this test splits commands at spaces only",
            i + 1
        );
        out.push(Shown {
            place: format!("{page}:{}", i + 1),
            words: text.split_whitespace().map(String::from).collect(),
        });
    }
    out
}

/// `line` without a trailing `# comment`.
fn uncommented(line: &str) -> &str {
    match line.find(" #") {
        Some(at) => line[..at].trim_end(),
        None => line,
    }
}

/// The workflows the local cloud runs whole; the others' applies are
/// planned (see the file's comment).
const APPLIED_LOCALLY: &[&str] = &[
    "batch-p4d.toml",
    "batch-p5.toml",
    "batch-p6.toml",
    "reference.toml",
    "multi-az.toml",
];

/// Commands that, as their page says, fail: the exit code and what they say.
const FAILS_AS_SHOWN: &[(&str, i32, &str)] = &[(
    // README: "A gate that cannot pass shows how a slow fabric fails".
    "scripts/quickstart workflows/batch-p4d.toml --var min_busbw=99999",
    1,
    "is not >= 99999",
)];

/// The instance type of the nodes a workflow reserves capacity for.
fn reserved_type(workflow: &str) -> &'static str {
    match workflow {
        "batch-p6.toml" => "p6-b200.48xlarge",
        "eks-p4d.toml" => "p4d.24xlarge",
        _ => "p5.48xlarge",
    }
}

/// Makes capacity reservation `id` (2 × `instance_type` in `zone`, a week
/// long; a Capacity Block when `block`) in the local cloud, in the zone's
/// region.
fn reserve(moto: &Moto, id: &str, instance_type: &str, zone: &str, block: bool) {
    let region = region_of(zone);
    let end = std::time::SystemTime::now() + std::time::Duration::from_secs(7 * 86_400);
    let mut params = format!(
        "Action=CreateCapacityReservation&Version=2016-11-15&InstanceType={instance_type}\
         &InstancePlatform=Linux%2FUNIX&AvailabilityZone={zone}&InstanceCount=2\
         &EndDateType=limited&EndDate={}\
         &TagSpecifications.1.ResourceType=capacity-reservation\
         &TagSpecifications.1.Tag.1.Key=flow-local-cloud%3Aid&TagSpecifications.1.Tag.1.Value={id}",
        humantime::format_rfc3339_seconds(end)
    );
    if block {
        params.push_str(
            "&TagSpecifications.1.Tag.2.Key=flow-local-cloud%3Areservation-type\
             &TagSpecifications.1.Tag.2.Value=capacity-block",
        );
    }
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential=testing/20260101/{region}/ec2/aws4_request, SignedHeaders=host, Signature=0"
    );
    let (status, xml) = moto.http(
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", &auth),
        ],
        params.as_bytes(),
    );
    assert!(status == 200 && xml.contains(id), "{status}: {xml}");
}

/// `us-west-2` of `us-west-2b`.
fn region_of(zone: &str) -> &str {
    zone.trim_end_matches(|c: char| c.is_ascii_lowercase())
}

/// A page's run: one local cloud and one state folder per workflow.
#[derive(Default)]
struct PageRun {
    clouds: BTreeMap<String, (Moto, BatchCompute, tempfile::TempDir)>,
    failures: Vec<String>,
}

impl PageRun {
    /// The local cloud and state folder of `workflow`, started on first use.
    fn cloud(&mut self, workflow: &str) -> &(Moto, BatchCompute, tempfile::TempDir) {
        self.clouds.entry(workflow.to_string()).or_insert_with(|| {
            let moto = Moto::start();
            let compute = moto.batch_compute();
            (moto, compute, tempfile::tempdir().unwrap())
        })
    }

    /// Run one shown command and note how it did not work as shown.
    fn run(&mut self, shown: &Shown) {
        let text = shown.text();
        let words: Vec<String> = shown
            .words
            .iter()
            .map(|w| {
                let sample = workspace_root().join("workflows/data/criteo-sample");
                w.replace("cr-…", "cr-0123456789abcdef0").replace(
                    "data_dir=/data/criteo",
                    &format!("data_dir={}", sample.display()),
                )
            })
            .collect();
        assert!(
            !words.iter().any(|w| w.contains('…')),
            "{}: `{text}` has a placeholder this test cannot fill",
            shown.place
        );
        let root = workspace_root();
        let expected = FAILS_AS_SHOWN.iter().find(|(t, ..)| *t == text);
        let (run, what) = match words[0].as_str() {
            "scripts/test" => return,
            // As quickstart runs itself once it has built flow (cargo
            // test built it).
            "scripts/quickstart" => {
                let mut c = Command::new(root.join("scripts/local-aws"));
                c.args(["env", "FLOW_QUICKSTART_INSIDE=1"])
                    .arg(root.join("scripts/quickstart"))
                    .args(&words[1..]);
                (output(c, &root), text.clone())
            }
            "scripts/local-aws" => {
                let state = tempfile::tempdir().unwrap();
                let mut c = Command::new(root.join("scripts/local-aws"));
                c.args(with_state(&words[1..], state.path()));
                (output(c, &root), text.clone())
            }
            "flow" => match self.flow(&words, &root) {
                Some(done) => done,
                None => return,
            },
            other => panic!("{}: no rule for `{other}` in `{text}`", shown.place),
        };
        let (code, says) = expected.map_or((0, ""), |(_, c, s)| (*c, *s));
        if run.code != code || !run.all().contains(says) {
            self.failures.push(format!(
                "{}: `{text}` (run as `{what}`) exited {} (wanted {code}{}):\n{}",
                shown.place,
                run.code,
                if says.is_empty() {
                    String::new()
                } else {
                    format!(", saying {says:?}")
                },
                run.all()
            ));
        }
    }

    /// A `flow` command: the run and the command as run, or `None` when it
    /// was judged here (an `output` or `logs` of a workflow not applied).
    fn flow(&mut self, words: &[String], root: &Path) -> Option<(Run, String)> {
        let verb = words[1].as_str();
        let file = words
            .iter()
            .find(|w| w.ends_with(".toml"))
            .expect("a flow command names its workflow");
        let workflow = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let local = APPLIED_LOCALLY.contains(&workflow.as_str());
        let (moto, _, state) = self.cloud(&workflow);
        // The zone a command names is in the user's region.
        let zone = var(words, "availability_zone").or_else(|| var(words, "az1"));
        let region = zone.as_deref().map_or("us-east-1", region_of).to_string();
        if let Some(cr) = var(words, "capacity_reservation_id") {
            let zone = zone.clone().unwrap_or("us-east-1a".into());
            let block = workflow == "batch-p6.toml"
                && var(words, "capacity_block").as_deref() != Some("false");
            reserve(moto, &cr, reserved_type(&workflow), &zone, block);
        }
        let mut args: Vec<String> = words[1..].to_vec();
        if verb == "apply" && !local {
            args[0] = "plan".into();
        }
        if matches!(args[0].as_str(), "apply" | "destroy") {
            args.push("--auto-approve".into());
        }
        args.extend(["--state-dir".into(), state.path().to_string_lossy().into()]);
        let mut c = Command::new(support::flow_bin());
        c.args(&args)
            .envs(moto.env())
            .env("AWS_REGION", &region)
            .env("AWS_DEFAULT_REGION", &region);
        let run = output(c, root);
        let what = format!("flow {}", args.join(" "));
        if matches!(verb, "output" | "logs") && !local {
            // Nothing applied: its address and flags are taken (no usage
            // error), whatever it then says of the empty state.
            if run.code == 2 || run.stderr.contains("Usage:") {
                self.failures.push(format!(
                    "`{what}`: refused its arguments; exited {}:\n{}",
                    run.code,
                    run.all()
                ));
            }
            return None;
        }
        Some((run, what))
    }
}

/// The value `--var NAME=VALUE` gives in `words`.
fn var(words: &[String], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    words
        .iter()
        .find_map(|w| w.strip_prefix(&prefix).map(String::from))
}

/// `words` with the folder after `--state-dir` replaced by `state`.
fn with_state(words: &[String], state: &Path) -> Vec<String> {
    let mut out = words.to_vec();
    if let Some(i) = out.iter().position(|w| w == "--state-dir") {
        out[i + 1] = state.to_string_lossy().into();
    }
    out
}

/// Run `c` in `dir` to its end.
fn output(mut c: Command, dir: &Path) -> Run {
    let out = c.current_dir(dir).output().expect("run a shown command");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// README.md and every page of docs/workflows, by their repository paths.
fn pages() -> Vec<(String, PathBuf)> {
    let root = workspace_root();
    let mut pages = vec![("README.md".to_string(), root.join("README.md"))];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for p in docs {
        let name = format!(
            "docs/workflows/{}",
            p.file_name().unwrap().to_string_lossy()
        );
        pages.push((name, p));
    }
    pages
}

#[test]
fn every_command_the_readme_and_the_workflow_pages_show_works_as_shown() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, path) in pages() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut page = PageRun::default();
        for shown in shown_commands(&name, &text) {
            eprintln!("{}: {}", shown.place, shown.text());
            page.run(&shown);
            ran += 1;
        }
        failures.append(&mut page.failures);
    }
    assert!(ran >= 30, "only {ran} commands found in the pages");
    assert!(
        failures.is_empty(),
        "{} of {ran} shown commands did not work as shown:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn commands_are_read_from_fenced_and_indented_blocks_with_continuations() {
    let page = "Intro `flow plan x.toml` in prose.\n\n    flow plan  a.toml   # why\n    \
                flow apply a.toml --var x=1 \\\n                --var y=2\n\n```sh\n$ scripts/quickstart b.toml\n```\n\n\
                ```toml\nflow = 1\n```\n    export A=1\n";
    let found: Vec<(String, String)> = shown_commands("p.md", page)
        .into_iter()
        .map(|s| (s.place.clone(), s.text()))
        .collect();
    assert_eq!(
        found,
        [
            ("p.md:3".to_string(), "flow plan a.toml".to_string()),
            (
                "p.md:4".into(),
                "flow apply a.toml --var x=1 --var y=2".into()
            ),
            ("p.md:8".into(), "scripts/quickstart b.toml".into()),
        ]
    );
}
