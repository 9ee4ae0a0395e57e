//! `flow report` seen in a real browser: an NCCL test and a training job
//! run twice on the real kube-apiserver, then the report of their state
//! and history opened in Debian's chromium (headless, through
//! chromedriver and Selenium: tests/support/browser_check.py). The test
//! checks the charts the page draws, that it fetched nothing and holds no
//! script, and writes a screenshot to target/test-output/report.png.
//! Without chromium, chromedriver or Selenium it fails, naming the one
//! missing; `scripts/local-browser --install` installs them (scripts/test
//! does).

use std::process::Command;

use crate::fixture;
use crate::support::kube::KubeServer;
use crate::support::{Project, workspace_root};

/// A training job whose log has loss lines in the FSDP case's format.
const TRAIN: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: train-${ROUND}
  annotations:
    test.flow/logs: |
      2025-06-20 14:17:10 I [train.py:103] Batch 1 Loss: 7.9${ROUND}, Speed: 9.41 samples/sec, lr: 0.000010
      2025-06-20 14:17:14 I [train.py:103] Batch 2 Loss: 7.5${ROUND}, Speed: 8.94 samples/sec, lr: 0.000010
      2025-06-20 14:17:17 I [train.py:103] Batch 3 Loss: 6.8${ROUND}, Speed: 9.42 samples/sec, lr: 0.000010
      2025-06-20 14:17:21 I [train.py:103] Batch 4 Loss: 6.1${ROUND}, Speed: 8.96 samples/sec, lr: 0.000010
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: fsdp:latest
"#;

fn workflow(kubeconfig: &str, round: u32) -> String {
    format!(
        r#"
[workflow]
name = "report"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kubeconfig}"
files = ["pytorchjob-crd.yaml"]

[steps.nccl]
provider = "kube.job"
depends_on = ["operator"]
[steps.nccl.inputs]
kubeconfig = "{kubeconfig}"
files = ["nccl-test.yaml"]
values = {{ NAME = "nccl-{round}", OUTCOME = "Succeeded" }}
parse = "nccl-tests"
expect = {{ busbw = ">= 100" }}

[steps.train]
provider = "kube.job"
depends_on = ["nccl"]
[steps.train.inputs]
kubeconfig = "{kubeconfig}"
files = ["train.yaml"]
values = {{ ROUND = "{round}" }}
parse = "torchrun"
expect = {{ losses = "decreasing" }}
"#
    )
}

/// Whether chromium, chromedriver and Selenium are here; else why not.
fn browser() -> Result<std::path::PathBuf, String> {
    let python = workspace_root().join(".venv/bin/python");
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        if !std::path::Path::new(tool).exists() {
            return Err(format!("{tool} is missing"));
        }
    }
    let selenium = Command::new(&python)
        .args(["-c", "import selenium"])
        .status()
        .is_ok_and(|s| s.success());
    if !selenium {
        return Err("Selenium is not in .venv".into());
    }
    Ok(python)
}

#[test]
fn the_report_draws_the_runs_and_fetches_nothing_in_a_real_browser() {
    let python =
        browser().unwrap_or_else(|why| panic!("{why}: run scripts/local-browser --install"));
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("train.yaml", TRAIN);
    for round in 1..=2 {
        p.write("wf.toml", &workflow(&k.kubeconfig_path(), round));
        p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    }
    let made = p
        .run(&["report", "wf.toml", "-o", "out/report.html"])
        .expect(0);
    assert!(
        made.stdout.contains("Report written to out/report.html"),
        "{}",
        made.all()
    );
    let page = std::fs::read_to_string(p.path().join("out/report.html")).unwrap();
    assert!(page.len() < 2 << 20, "{} bytes", page.len());
    assert!(!page.contains("<script"), "no script");

    let out_dir = workspace_root().join("target/test-output");
    std::fs::create_dir_all(&out_dir).unwrap();
    let shot = out_dir.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let checked = Command::new(&python)
        .arg(workspace_root().join("tests/support/browser_check.py"))
        .arg(p.path().join("out/report.html"))
        .arg(&shot)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(seen["title"], "flow report: report");
    assert_eq!(seen["scripts"], 0);
    // Nothing fetched: the one request is the page itself.
    assert_eq!(
        seen["requests"],
        serde_json::json!([seen["page"]]),
        "{seen}"
    );
    assert_eq!(seen["resources"], serde_json::json!([]), "{seen}");
    let svg = |id: &str| {
        seen["svgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no svg #{id} in {seen}"))
    };
    // The last apply ran nccl and train again (operator unchanged): a bar each.
    assert_eq!(svg("gantt-chart")["bars"], 3, "{seen}");
    // Both runs of each job, drawn.
    assert_eq!(svg("busbw-chart-nccl")["lines"], 2, "{seen}");
    assert_eq!(svg("loss-chart-train")["lines"], 2, "{seen}");
    for s in seen["svgs"].as_array().unwrap() {
        assert!(s["width"].as_u64().unwrap() > 100, "drawn: {s}");
    }
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(png.len() > 10_000, "{} bytes", png.len());
}
