//! kube.job: PyTorchJobs and Jobs run to their end, their failures named,
//! kills and interrupts during the wait.

use std::time::Duration;

use crate::manifests::WEB;
use crate::support::kube::KubeServer;
use crate::support::{Project, finish, wait_until};
use crate::{fixture, log};

/// The operator's CRD through kube.manifest, an NCCL test as a PyTorchJob
/// through kube.job: followed to Succeeded, its logs in the step log, the
/// bus bandwidth captured as an output that a later step uses.
fn nccl_workflow(k: &KubeServer, name: &str, outcome: &str) -> String {
    format!(
        r#"
[workflow]
name = "nccl"

[steps.operator]
provider = "kube.manifest"
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.nccl]
provider = "kube.job"
depends_on = ["operator"]
[steps.nccl.inputs]
kubeconfig = "{kc}"
files = ["nccl-test.yaml"]
values = {{ NAME = "{name}", OUTCOME = "{outcome}" }}
success_pattern = "Out of bounds values : 0 OK"
capture = {{ busbw = "Avg bus bandwidth\\s*:\\s*([0-9.]+)" }}

[steps.report]
provider = "exec"
[steps.report.inputs]
run = "echo busbw=$BUSBW >> $FLOW_OUTPUT"
env = {{ BUSBW = "${{steps.nccl.outputs.busbw}}" }}
"#,
        kc = k.kubeconfig_path()
    )
}

#[test]
fn pytorchjob_succeeds_and_its_bandwidth_is_an_output() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "nccl", "Succeeded"));
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    let out = p.run(&["output", "wf.toml", "nccl.busbw"]).expect(0);
    assert_eq!(out.stdout.trim(), "186.437");
    assert_eq!(
        p.run(&["output", "wf.toml", "report.busbw"])
            .expect(0)
            .stdout
            .trim(),
        "186.437"
    );
    let l = log(&p, "nccl");
    assert!(
        l.contains("[nccl-master-0] # Avg bus bandwidth    : 186.437"),
        "{l}"
    );
    assert!(l.contains("[nccl-worker-1] nccl-worker-1 done"), "{l}");
    assert!(l.contains("pod nccl-master-0: Succeeded"), "{l}");
    let job = k
        .get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl")
        .expect("job");
    assert_eq!(job["metadata"]["annotations"]["flow.dev/step"], "nccl");

    // Destroy deletes the job and its pods.
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl")
            .is_none()
    );
    assert!(
        k.get("/api/v1/namespaces/default/pods/nccl-worker-0")
            .is_none()
    );
}

#[test]
fn pytorchjob_failure_names_the_failing_pod() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "broken", "Failed"));
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    let all = apply.all();
    assert!(
        all.contains("PyTorchJob default/broken failed: PyTorchJobFailed"),
        "{all}"
    );
    assert!(
        all.contains("pod broken-worker-1: container pytorch exited with code 1 (Error)"),
        "{all}"
    );
    assert!(
        all.contains("Avg bus bandwidth"),
        "the failing pod's last lines are shown: {all}"
    );
    // The next apply runs the job again (a new one, the failed one deleted).
    let uid = k
        .uid("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/broken")
        .unwrap();
    // The failure kept the intent: the next apply reads the job by its
    // token first, finds it ended in failure, and only then starts anew.
    let show = p.run(&["state", "show", "wf.toml", "nccl"]).expect(0);
    assert!(show.stdout.contains("\"in_flight\": {"), "{}", show.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(1);
    assert!(
        log(&p, "nccl").contains("deleting what the failed create left"),
        "{}",
        log(&p, "nccl")
    );
    assert_ne!(
        k.uid("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/broken")
            .unwrap(),
        uid
    );
}

/// `kill -9` while flow waits for a Deployment and a PyTorchJob; the next
/// apply adopts both (same uids) and finishes the wait.
#[test]
fn kill_during_waits_then_resume_recreates_nothing() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "web.yaml");
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    let wf = format!(
        "{}\n{}",
        WEB.replace("KUBECONFIG", &k.kubeconfig_path()),
        nccl_workflow(&k, "held", "Succeeded").replace("[workflow]\nname = \"nccl\"\n", "")
    );
    p.write("wf.toml", &wf);
    k.driver().hold("web");
    k.driver().hold("held");
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let dep = "/apis/apps/v1/namespaces/default/deployments/web";
    let job = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/held";
    wait_until(
        Duration::from_secs(60),
        "the deployment and the job to exist",
        || {
            k.get(dep).is_some()
                && k.get("/api/v1/namespaces/default/pods/held-worker-1")
                    .is_some()
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    crate::support::signal(&child, libc::SIGKILL);
    let killed = finish(child);
    assert_eq!(killed.code, -1, "{}", killed.all());
    let (dep_uid, job_uid) = (k.uid(dep).unwrap(), k.uid(job).unwrap());

    // Each interrupted create, by the token state holds for it: the plan
    // names it, and the resume reconciles that operation, not a new one.
    let token_of = |step: &str| {
        let show = p.run(&["state", "show", "wf.toml", step]).expect(0);
        let rec: serde_json::Value = serde_json::from_str(&show.stdout).expect("state show JSON");
        assert_eq!(rec["in_flight"]["operation"], "create", "{rec}");
        rec["in_flight"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no in-flight token for {step}: {rec}"))
            .to_string()
    };
    let tokens = [("web", token_of("web")), ("nccl", token_of("nccl"))];
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    for (step, token) in &tokens {
        assert!(
            plan.stdout.contains(&format!("operation token {token}")),
            "the plan does not name {step}'s interrupted operation {token}: {}",
            plan.stdout
        );
    }
    k.driver().release("web");
    k.driver().release("held");
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    for (step, token) in &tokens {
        let said = format!("reconciling an interrupted create (token {token})");
        assert!(log(&p, step).contains(&said), "{step}: {}", log(&p, step));
    }
    assert_eq!(
        k.uid(dep).unwrap(),
        dep_uid,
        "the Deployment was made again"
    );
    assert_eq!(
        k.uid(job).unwrap(),
        job_uid,
        "the PyTorchJob was started again"
    );
    assert_eq!(
        p.run(&["output", "wf.toml", "nccl.busbw"])
            .expect(0)
            .stdout
            .trim(),
        "186.437"
    );
    assert!(log(&p, "nccl").contains("from the interrupted run exists: following it"));
}

/// Ctrl-C while a job runs: flow deletes the job and its pods.
#[test]
fn interrupt_deletes_the_running_job() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    p.write("wf.toml", &nccl_workflow(&k, "long", "Succeeded"));
    k.driver().hold("long");
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    wait_until(Duration::from_secs(60), "the job's pods", || {
        k.get("/api/v1/namespaces/default/pods/long-worker-1")
            .is_some()
            && log(&p, "nccl").contains("pod long-worker-1")
    });
    crate::support::signal(&child, libc::SIGINT);
    let run = finish(child);
    assert_ne!(run.code, 0, "{}", run.all());
    assert!(
        run.all()
            .contains("interrupted: PyTorchJob default/long and its pods were deleted"),
        "{}",
        run.all()
    );
    assert!(
        k.get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/long")
            .is_none()
    );
    assert!(
        k.get("/api/v1/namespaces/default/pods/long-master-0")
            .is_none()
    );
}

/// An NCCL test gated on its bandwidth: `parse` reads nccl-tests' table,
/// the plan shows the gate, a bandwidth under it fails the step with the
/// value, the threshold and the log line and stops the step that uses it;
/// with the threshold met, the next apply runs the job again and goes on.
#[test]
fn a_bandwidth_under_its_gate_fails_the_job_and_stops_its_dependents() {
    let k = KubeServer::start();
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    let workflow = nccl_workflow(&k, "gated", "Succeeded")
        .replace(
            "[steps.operator]",
            "[vars.min_busbw]\ntype = \"number\"\ndefault = 100\n\n[steps.operator]",
        )
        .replace(
            "capture = { busbw = \"Avg bus bandwidth\\\\s*:\\\\s*([0-9.]+)\" }",
            "parse = \"nccl-tests\"\nexpect = { busbw = \">= ${vars.min_busbw}\", out_of_bounds = \"== 0\" }",
        );
    assert!(workflow.contains("parse = \"nccl-tests\""), "{workflow}");
    p.write("wf.toml", &workflow);
    let plan = p
        .run(&["plan", "wf.toml", "--var", "min_busbw=99999"])
        .expect(0);
    assert!(
        plan.stdout.contains(
            "gates on its nccl-tests output: busbw >= 99999, out_of_bounds == 0; a value that fails one fails the step"
        ),
        "{}",
        plan.all()
    );
    let apply = p
        .run(&[
            "apply",
            "wf.toml",
            "--auto-approve",
            "--var",
            "min_busbw=99999",
        ])
        .expect(1);
    let all = apply.all();
    assert!(
        all.contains(
            "expect: busbw = 186.437 is not >= 99999 (log line: `# Avg bus bandwidth    : 186.437`)"
        ),
        "{all}"
    );
    assert!(all.contains("a value failed its gate in `expect`"), "{all}");
    // The job ran (the server has it, finished); the step that uses its
    // bandwidth did not.
    let job = k
        .get("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/gated")
        .expect("the job ran");
    assert!(
        job["status"]["conditions"]
            .to_string()
            .contains("Succeeded")
    );
    assert_ne!(p.run(&["output", "wf.toml", "report.busbw"]).code, 0);

    // The threshold met: the job runs again and the rest goes on.
    let apply = p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        apply.all().contains("captured busbw = 186.437"),
        "{}",
        apply.all()
    );
    assert!(
        apply
            .all()
            .contains("captured sizes = a table of 1 entries"),
        "{}",
        apply.all()
    );
    assert_eq!(
        p.run(&["output", "wf.toml", "report.busbw"])
            .expect(0)
            .stdout
            .trim(),
        "186.437"
    );
    assert_eq!(
        p.run(&["output", "wf.toml", "nccl.busbw_peak"])
            .expect(0)
            .stdout
            .trim(),
        "171.04"
    );

    // Both runs are in the history, the failed one with its verdict; it
    // outlives destroy.
    p.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    let json = p
        .run(&["runs", "wf.toml", "nccl", "--json"])
        .expect(0)
        .stdout;
    let runs: serde_json::Value = serde_json::from_str(&json).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{json}");
    let (failed, passed) = (&runs[0], &runs[1]);
    assert_eq!(failed["outcome"], "failed");
    assert_eq!(failed["verdicts"][0]["gate"], ">= 99999");
    assert_eq!(failed["verdicts"][0]["passed"], false);
    assert_eq!(
        failed["values"]["busbw"], 186.437,
        "values kept on a failed gate"
    );
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("busbw = 186.437 is not >= 99999"),
        "{failed}"
    );
    assert_eq!(passed["outcome"], "succeeded");
    assert_eq!(
        passed["values"]["sizes"]["2147483648"]["out_of_place"]["busbw"],
        171.04
    );
    assert_eq!(passed["provider"], "kube.job");
    assert_ne!(
        failed["inputs_digest"], passed["inputs_digest"],
        "the gate's threshold is an input"
    );
    assert!(
        passed["log"].as_str().unwrap().ends_with("nccl.log"),
        "{passed}"
    );
    let list = p.run(&["runs", "wf.toml"]).expect(0).stdout;
    assert_eq!(
        list.lines().filter(|l| l.contains(" nccl ")).count(),
        2,
        "{list}"
    );
    assert!(
        list.contains("failed") && list.contains("1/2") && list.contains("2/2"),
        "{list}"
    );
    let (a, b) = (
        failed["id"].as_str().unwrap(),
        passed["id"].as_str().unwrap(),
    );
    let cmp = p.run(&["compare", a, b]).expect(0).stdout;
    assert!(
        cmp.lines()
            .any(|l| l.starts_with("busbw ") && l.contains("186.437") && l.ends_with("+0.0 %")),
        "{cmp}"
    );
    assert!(cmp.contains("busbw at 2 GiB"), "{cmp}");
    let missing = p.run(&["compare", a, "no-such-run"]);
    assert_ne!(missing.code, 0);
    assert!(
        missing.all().contains("there is no run `no-such-run`"),
        "{}",
        missing.all()
    );

    // A line damaged (a crash in the middle of writing it) is named and
    // skipped; the next apply records its run after it.
    let history = p.path().join(".flow/wf/runs.jsonl");
    let mut text = std::fs::read_to_string(&history).unwrap();
    text.push_str("{\"id\":\"cut-short\",\"step\":\"nccl\",\"outc\n");
    std::fs::write(&history, text).unwrap();
    let listed = p.run(&["runs", "wf.toml"]).expect(0);
    assert!(
        listed
            .stderr
            .contains("warning: line 3 of the run history is damaged and skipped"),
        "{}",
        listed.all()
    );
    assert_eq!(listed.stdout.lines().count(), 3, "{}", listed.stdout);
    p.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
    let listed = p.run(&["runs", "wf.toml", "nccl"]).expect(0);
    assert_eq!(listed.stdout.lines().count(), 4, "{}", listed.all());
}

/// With a paced driver (the benchmark's latency model), a rollout and a job
/// last their length: the operator's Deployment is not available, and the
/// PyTorchJob is seen running, until then; flow waits both out.
/// (`bench/time-to-training.py` runs the EKS workflows' Kubernetes steps so.)
#[test]
fn a_paced_driver_holds_rollouts_and_jobs_for_their_length() {
    use crate::support::kube::pace::Pace;
    let k = KubeServer::start();
    let pace = Pace {
        rollout: Duration::from_millis(1500),
        job: Duration::from_secs(3),
    };
    k.driver().pace(pace);
    let p = Project::new();
    fixture(&p, "pytorchjob-crd.yaml");
    fixture(&p, "nccl-test.yaml");
    fixture(&p, "web.yaml");
    // The operator's step also rolls out a Deployment.
    let wf = nccl_workflow(&k, "nccl", "Succeeded").replacen(
        r#"files = ["pytorchjob-crd.yaml"]"#,
        r#"files = ["pytorchjob-crd.yaml", "web.yaml"]
values = { REPLICAS = "1" }"#,
        1,
    );
    p.write("wf.toml", &wf);
    let child = p.spawn(&["apply", "wf.toml", "--auto-approve"]);
    let job = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/nccl";
    let running = |j: &serde_json::Value| {
        j["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Running" && c["status"] == "True")
        })
    };
    wait_until(
        Duration::from_secs(60),
        "the paced job seen running",
        || k.get(job).is_some_and(|j| running(&j)),
    );
    let apply = finish(child);
    assert_eq!(apply.code, 0, "{}", apply.all());
    let done = k.get(job).expect("job");
    assert!(!running(&done), "{done}");

    let last: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(p.path().join(".flow/wf/last-run.json")).expect("last-run.json"),
    )
    .expect("JSON");
    let took = |step: &str| {
        let s = last["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["step"] == step))
            .unwrap_or_else(|| panic!("{step} in {last}"));
        Duration::from_millis(s["end_ms"].as_u64().unwrap() - s["start_ms"].as_u64().unwrap())
    };
    // The operator's manifest holds a Deployment (the rollout's length); the
    // job its own length. Each ends within a few driver passes after it.
    let (operator, nccl) = (took("operator"), took("nccl"));
    assert!(
        operator >= pace.rollout && operator < pace.rollout + Duration::from_secs(5),
        "operator took {operator:?}"
    );
    assert!(
        nccl >= pace.job && nccl < pace.job + Duration::from_secs(5),
        "nccl took {nccl:?}"
    );
}
