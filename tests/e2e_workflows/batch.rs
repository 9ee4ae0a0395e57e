//! The Batch workflows (p4d, p5, p6), the reference pair, and batch-p4d's
//! state from before its steps moved into the batch-efa module.

use super::*;
use crate::support::secret_scan::{Kind, SecretScan};

/// `l.flow(command, args)` run through `scan`: its output, and the command
/// lines and environments of flow and its descendants sampled while it
/// runs, are places of the scan, labelled `label`.
pub(super) fn scanned(
    scan: &mut SecretScan,
    l: &Local,
    label: &str,
    command: &[&str],
    args: &[&str],
) -> Run {
    let state = l.state();
    let mut all: Vec<&str> = command.to_vec();
    all.push(&l.wf);
    all.extend(["--state-dir", &state]);
    all.extend(args);
    let mut cmd = l.p.cmd(&all);
    cmd.envs(l.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    scan.command(label, cmd)
}

/// `l.output(key)` run through `scan`.
pub(super) fn scanned_output(scan: &mut SecretScan, l: &Local, key: &str) -> String {
    let label = format!("output {key}");
    scanned(scan, l, &label, &["output"], &[key])
        .expect(0)
        .stdout
        .trim()
        .to_string()
}

/// A Batch workflow (p4d, p5, p6): VPC and Batch stacks, bucket, SSH key in
/// Secrets Manager, and the NCCL test with its bus bandwidth captured from
/// the job's CloudWatch log stream.
fn batch_workflow_end_to_end(
    kind: &str,
    instance_type: &str,
    efa_interfaces: usize,
    busbw: std::ops::Range<f64>,
) {
    let name = format!("batch-{kind}.toml");
    validates_and_plans_offline(&name);
    let moto = Moto::start();
    // The nodes' faults (scripts/local-cloud/batch_nodes.py): node 1 of
    // every multi-node job lacks an EFA device until the table is emptied.
    let faults_dir = tempfile::tempdir().unwrap();
    let faults = faults_dir.path().join("faults");
    std::fs::write(&faults, format!("#1 efa {}\n", efa_interfaces - 1)).unwrap();
    let _compute: BatchCompute =
        moto.batch_compute_with(&[("FLOW_TEST_FAULTS", faults.to_str().unwrap())]);
    let l = Local::new(&name, moto.env());
    // Every command goes through the secret scan (see its end).
    let mut scan = SecretScan::new();
    for file in [l.wf.clone(), workflow("modules/batch-efa/main.toml")] {
        let text = std::fs::read_to_string(&file).unwrap();
        scan.input(&file, text);
    }
    scan.without_control(
        Kind::Cmdline,
        "flow starts no process in the Batch workflows (no exec step): its own command line, read in every command, is the test's",
    )
    .without_control(
        Kind::Environ,
        "flow starts no process in the Batch workflows: its own environment, read in every command, is the test's",
    );
    let flow = |scan: &mut SecretScan, label: &str, command: &[&str], args: &[&str]| {
        scanned(scan, &l, label, command, args)
    };

    // Every node is checked on its own instance before the fabric is
    // measured: node 1, an EFA device short, is named by the instance EC2
    // has at its address, with fi_info's line; node 0 passes; the NCCL
    // test is not submitted.
    let checked = flow(&mut scan, "checked apply", &["apply"], &["--auto-approve"]).expect(1);
    let all = checked.all();
    let job = all
        .split("job `node-health-2node` (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no node check job in {all}"))
        .to_string();
    let (bad, good) = (
        moto.instance_of_batch_node(&job, 1),
        moto.instance_of_batch_node(&job, 0),
    );
    assert_ne!(bad, good);
    assert!(
        all.contains(&format!(
            "{bad}: fi_info lists {} EFA devices, the EFA interfaces of a {instance_type} is {efa_interfaces}",
            efa_interfaces - 1
        )),
        "{all}"
    );
    assert!(!all.contains(&format!("{good}: ")), "{all}");
    assert!(all.contains("cluster.nccl    ↷ skipped"), "{all}");
    assert!(!all.contains("job `nccl-test-2node` ("), "{all}");
    std::fs::write(&faults, "").unwrap();

    // A gate no fabric meets: the nodes pass their check now, the NCCL
    // step fails, saying what it measured against what it was held to.
    let gated = flow(
        &mut scan,
        "gated apply",
        &["apply"],
        &["--auto-approve", "--var", "min_busbw=99999"],
    )
    .expect(1);
    assert!(
        gated.all().contains("1 created, 4 unchanged, 1 failed"),
        "{}",
        gated.all()
    );
    assert!(
        gated
            .all()
            .contains("is not >= 99999 (log line: `# Avg bus bandwidth"),
        "{}",
        gated.all()
    );

    // With the workflow's own threshold the job runs again and passes.
    // The failed run's intent is read first; the job then runs anew.
    let apply = flow(&mut scan, "apply", &["apply"], &["--auto-approve"]).expect(0);
    let all = apply.all();
    assert!(all.contains("1 created, 5 unchanged, 0 failed"), "{all}");
    assert!(all.contains("captured busbw = "), "{all}");

    // The stacks, by the names the vars make.
    for stack in ["vpc", "batch"] {
        assert_eq!(
            stack_status(&moto, &format!("batch-{kind}-{stack}")).as_deref(),
            Some("CREATE_COMPLETE")
        );
    }
    // The launch template with one EFA interface per network card.
    let lt = scanned_output(&mut scan, &l, "cluster.batch.LaunchTemplateId");
    assert_eq!(efa_interfaces_of(&moto, &lt), efa_interfaces);
    // The compute environment and queue the job ran in.
    let (status, envs) = moto.rest_call("batch", "POST", "/v1/describecomputeenvironments", "{}");
    assert_eq!(status, 200, "{envs}");
    assert!(
        envs.contains(&format!("\"{lt}\"")) || envs.contains(&lt),
        "{envs}"
    );
    // The NCCL test: the bandwidth the job's log shows is the step's
    // output; the local cloud scales its table to the instance type's
    // fabric and varies it by a few percent a run, and says so.
    let measured_text = scanned_output(&mut scan, &l, "cluster.nccl.busbw");
    let measured: f64 = measured_text.parse().unwrap();
    assert!(busbw.contains(&measured), "{measured} outside {busbw:?}");
    assert!(
        scanned_output(&mut scan, &l, "cluster.nccl.emulated")
            .starts_with("flow local cloud: emulated all_reduce_perf on "),
    );
    let stream = scanned_output(&mut scan, &l, "cluster.nccl.log_stream");
    let events = moto.json_call(
        "logs",
        "Logs_20140328.GetLogEvents",
        &format!(
            r#"{{"logGroupName":"/aws/batch/job","logStreamName":"{stream}","startFromHead":true}}"#
        ),
    );
    assert!(
        events
            .to_string()
            .contains(&format!("Avg bus bandwidth    : {measured:.4}")),
        "{events}"
    );
    let log = std::fs::read_to_string(l.p.path().join("state/logs/cluster%2Enccl.log")).unwrap();
    assert!(log.contains("# Out of bounds values : 0 OK"), "{log}");
    // The SSH key: in Secrets Manager only, never in state.
    let secret = moto.json_call(
        "secretsmanager",
        "secretsmanager.GetSecretValue",
        &format!(r#"{{"SecretId":"batch-{kind}-ssh-key"}}"#),
    );
    let key = secret["SecretString"].as_str().unwrap_or_default();
    assert!(
        key.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{secret}"
    );
    let body: String = key.lines().nth(1).unwrap_or_default().to_string();
    // The bucket.
    let bucket = scanned_output(&mut scan, &l, "cluster.bucket.name");
    assert!(bucket.starts_with(&format!("batch-{kind}-")), "{bucket}");
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 200);

    // Nothing left to do.
    flow(&mut scan, "plan", &["plan"], &["--detailed-exitcode"]).expect(0);

    // What flow made, read back: the key pair it generated (its public
    // half an output), the operation token it gave CreateSecret (the
    // secret's version id), the job it submitted, the NCCL run's id and
    // inputs digest in the history.
    let public_key = scanned_output(&mut scan, &l, "cluster.ssh.public_key");
    let version = secret["VersionId"].as_str().unwrap_or_default().to_string();
    let job_id = scanned_output(&mut scan, &l, "cluster.nccl.job_id");
    let submitted = format!("job `nccl-test-2node` ({job_id}): submitted");
    let runs = flow(&mut scan, "runs --json", &["runs"], &["--json"]).expect(0);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).expect("JSON");
    let run = runs
        .as_array()
        .and_then(|r| r.iter().rfind(|r| r["outcome"] == "succeeded"))
        .unwrap_or_else(|| panic!("no succeeded run in {runs}"));
    let run_id = run["id"].as_str().unwrap_or_default().to_string();
    let digest = run["inputs_digest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    flow(&mut scan, "runs", &["runs"], &[]).expect(0);
    scan.tree_as_of("before destroy", l.p.path(), |_| false);

    // Destroy: every stack, the secret, the bucket.
    let destroy = flow(&mut scan, "destroy", &["destroy"], &["--auto-approve"]).expect(0);
    scan.tree_as_of("after destroy", l.p.path(), |_| false);
    // The generated private key (each of its lines, in clear or encoded)
    // is in nothing flow printed or wrote; each kind of place has a
    // control flow wrote there.
    scan.control(Kind::State, "the generated public key", &public_key)
        .control(Kind::State, "CreateSecret's operation token", &version)
        .control(Kind::Backups, "the generated public key", &public_key)
        .control(Kind::Backups, "CreateSecret's operation token", &version)
        .control(Kind::StepLogs, "the job flow submitted", &submitted)
        .control(Kind::RunHistory, "the NCCL run's id", &run_id)
        .control(Kind::RunHistory, "the NCCL run's inputs digest", &digest)
        .control_in(Kind::Output, "apply", "the job flow submitted", &submitted)
        .control_in(Kind::Output, "runs", "the NCCL run's id", &run_id);
    for line in key.lines().filter(|line| line.len() > 20) {
        scan.assert_clean(line);
    }
    assert!(body.len() > 20);
    assert!(destroy.stdout.contains("6 deleted"), "{}", destroy.all());
    for stack in ["vpc", "batch"] {
        assert_eq!(stack_status(&moto, &format!("batch-{kind}-{stack}")), None);
    }
    let listed = moto.json_call("secretsmanager", "secretsmanager.ListSecrets", "{}");
    assert!(
        listed["SecretList"]
            .as_array()
            .is_none_or(|s| s.iter().all(|s| !s["DeletedDate"].is_null())),
        "{listed}"
    );
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 404);
}

#[test]
fn batch_p4d_end_to_end() {
    // The p4d table itself, ±3 %.
    batch_workflow_end_to_end("p4d", "p4d.24xlarge", 4, 17.3..18.5);
}

#[test]
fn batch_p5_end_to_end() {
    // p5's 3,200 Gb/s of EFA: the table × 10.8, ±3 %.
    batch_workflow_end_to_end("p5", "p5.48xlarge", 32, 187.0..200.0);
}

#[test]
fn batch_p6_end_to_end() {
    batch_workflow_end_to_end("p6", "p6-b200.48xlarge", 8, 187.0..200.0);
}

/// The reference pair: the bucket and the one-AZ VPC stack, with the ids
/// other stacks import.
#[test]
fn reference_end_to_end() {
    validates_and_plans_offline("reference.toml");
    let moto = Moto::start();
    let l = Local::new("reference.toml", moto.env());
    let apply = l.flow(&["apply"], &["--auto-approve"]).expect(0);
    assert!(apply.stdout.contains("3 created"), "{}", apply.all());
    assert_eq!(
        stack_status(&moto, "ml-reference-vpc").as_deref(),
        Some("CREATE_COMPLETE")
    );
    let exports = moto.query_call("cloudformation", "Action=ListExports&Version=2010-05-15");
    let subnet = l.output("outputs.private_subnet");
    let sg = l.output("outputs.efa_security_group");
    assert!(
        subnet.starts_with("subnet-") && exports.contains(&subnet),
        "{exports}"
    );
    assert!(sg.starts_with("sg-") && exports.contains(&sg), "{exports}");
    let bucket = l.output("outputs.bucket");
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 200);

    // A var changed in place: versioning on, nothing replaced.
    l.flow(&["plan"], &["--detailed-exitcode"]).expect(0);
    let plan = l
        .flow(
            &["plan"],
            &["--var", "bucket_versioning=true", "--detailed-exitcode"],
        )
        .expect(2);
    assert!(plan.stdout.contains("0 to replace"), "{}", plan.stdout);

    l.flow(&["destroy"], &["--auto-approve"]).expect(0);
    assert_eq!(stack_status(&moto, "ml-reference-vpc"), None);
    let (status, _) = moto.rest_call("s3", "HEAD", &format!("/{bucket}"), "");
    assert_eq!(status, 404);
}

/// Writes tests/fixtures/compat-batch-p4d/state: batch-p4d as it was before
/// its steps moved into workflows/modules/batch-efa (the copy in the
/// fixture), applied against moto by the binary `FLOW_E2E_BIN` names, the
/// release before the move. Run on purpose only:
/// `FLOW_E2E_BIN=…/old/flow cargo test -p flow --test e2e_workflows -- --ignored write_compat`.
#[test]
#[ignore = "writes a fixture with an earlier release; run on purpose"]
fn write_compat_batch_p4d_fixture() {
    assert!(
        std::env::var_os("FLOW_E2E_BIN").is_some(),
        "FLOW_E2E_BIN must name the release from before the module move: the fixture is that release's state"
    );
    let fixture = workspace_root().join("tests/fixtures/compat-batch-p4d");
    let moto = Moto::start();
    let _compute: BatchCompute = moto.batch_compute();
    let p = Project::new();
    p.write(
        "batch-p4d.toml",
        &std::fs::read_to_string(fixture.join("batch-p4d.toml")).unwrap(),
    );
    for template in ["vpc-one-az.yaml", "batch-p4d.yaml"] {
        let text =
            std::fs::read_to_string(workspace_root().join("workflows/templates").join(template))
                .unwrap();
        p.write(&format!("templates/{template}"), &text);
    }
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    p.run_env(
        &[
            "apply",
            "batch-p4d.toml",
            "--state-dir",
            "state",
            "--auto-approve",
        ],
        &env,
    )
    .expect(0);
    let to = fixture.join("state");
    let _ = std::fs::remove_dir_all(&to);
    for file in support::files_under(&p.path().join("state")) {
        let relative = file.strip_prefix(p.path().join("state")).unwrap();
        if relative.starts_with("logs") || relative.ends_with("lock") {
            continue;
        }
        let dest = to.join(relative);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&file, &dest).unwrap();
    }
}

/// batch-p4d's state from before its steps moved into the batch-efa module
/// (tests/fixtures/compat-batch-p4d, written by the earlier release): the
/// module version plans the five moves its [[moved]] entries make; the
/// Batch stack is updated, its template having lost the conditions that
/// were there for moto alone (false on AWS, so nothing there changes); and
/// the NCCL test runs again, because its step now reads the table and gates
/// it (`capture` became `parse` and `expect`) and its job definition and
/// queue are the updated stack's; each node is checked first, a new step
/// (`cluster.health`).
#[test]
fn batch_p4d_state_from_before_the_module_plans_only_moves() {
    let p = Project::new();
    support::copy_dir(
        &workspace_root().join("tests/fixtures/compat-batch-p4d/state"),
        &p.path().join("state"),
    );
    let wf = workflow("batch-p4d.toml");
    let state = p.path().join("state").to_string_lossy().into_owned();
    // Offline: no AWS to read the objects from, so the plan is from state
    // alone, as asked (a plan that tried to read them would stop, naming
    // the missing region and credentials).
    let plan = offline(&p, &["plan", &wf, "--state-dir", &state, "--refresh=false"]);
    let text =
        String::from_utf8_lossy(&plan.stdout).into_owned() + &String::from_utf8_lossy(&plan.stderr);
    assert!(plan.status.success(), "{text}");
    for step in ["vpc", "bucket", "ssh", "batch", "nccl"] {
        assert!(text.contains(&format!("{step} → cluster.{step}")), "{text}");
    }
    assert!(
        text.contains("~ cluster.batch   (cloudformation.stack)  update — inputs changed"),
        "{text}"
    );
    assert!(
        text.contains("+ cluster.health  (batch.node_check)  create — new step"),
        "{text}"
    );
    assert!(
        text.contains(
            "Plan: 5 to move, 1 to create, 1 to update, 1 to replace, 0 to delete, 3 unchanged."
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "cluster.nccl    (batch.job)  replace — forced by `capture`, `expect`, `job_definition`, `job_queue`, `parse`"
        ),
        "{text}"
    );
}

/// batch-p5's compute environment launches into the reservation its var
/// names: a reservation in another zone than the VPC's subnet (read
/// through the VPC stack's exports) is refused before the Batch stack is
/// made, and by the plan once the VPC exists; the right one plans with its
/// window and the stack is made.
#[test]
fn batch_p5_judges_its_capacity_reservation_before_the_batch_stack() {
    let moto = Moto::start();
    let _compute: BatchCompute = moto.batch_compute();
    moto.capacity_reservation(
        "cr-0b000000000000001",
        "p5.48xlarge",
        "us-east-1b",
        2,
        false,
        Some(14),
    );
    moto.capacity_reservation(
        "cr-0a000000000000001",
        "p5.48xlarge",
        "us-east-1a",
        2,
        false,
        Some(14),
    );
    // Wide enough that no refusal is wrapped.
    let mut env = moto.env();
    env.push(("COLUMNS".into(), "400".into()));
    let l = Local::new("batch-p5.toml", env);
    let zone_b = "capacity_reservation_id=cr-0b000000000000001";
    let refusal = "compute environment DistributedDeepLearningCE: capacity reservation cr-0b000000000000001 is in us-east-1b, the step's subnets are in us-east-1a";

    // The first plan cannot know the VPC's subnets: the create judges them.
    let first = l
        .flow(
            &["apply"],
            &[
                "--auto-approve",
                "--var",
                zone_b,
                "--target",
                "cluster.batch",
            ],
        )
        .expect(1);
    assert!(first.all().contains(refusal), "{}", first.all());
    // The plan let it through (the subnet was not known); the create
    // refused it after the VPC was made and before CreateStack.
    assert!(
        first.all().contains("parameters   = (known after apply)"),
        "{}",
        first.all()
    );
    assert!(
        first.all().contains("2 created, 0 unchanged, 1 failed"),
        "{}",
        first.all()
    );
    assert!(
        first.all().contains("give the step a subnet in us-east-1b"),
        "{}",
        first.all()
    );
    assert_eq!(stack_status(&moto, "batch-p5-batch"), None);
    assert_eq!(
        stack_status(&moto, "batch-p5-vpc").as_deref(),
        Some("CREATE_COMPLETE")
    );

    // Now the plan reads the subnet through the VPC stack's export.
    let plan = l.flow(&["plan"], &["--var", zone_b]).expect(1);
    assert!(plan.all().contains(refusal), "{}", plan.all());

    let zone_a = "capacity_reservation_id=cr-0a000000000000001";
    let plan = l.flow(&["plan"], &["--var", zone_a]).expect(0);
    assert!(
        plan.stdout.contains(
            "DistributedDeepLearningCE: capacity reservation cr-0a000000000000001: 2 of 2 × p5.48xlarge available in us-east-1a, active"
        ),
        "{}",
        plan.stdout
    );
    l.flow(
        &["apply"],
        &[
            "--auto-approve",
            "--var",
            zone_a,
            "--target",
            "cluster.batch",
        ],
    )
    .expect(0);
    assert_eq!(
        stack_status(&moto, "batch-p5-batch").as_deref(),
        Some("CREATE_COMPLETE")
    );
}

/// The EFA group batch-p5's compute environment imports from the VPC stack
/// is judged through EC2 at plan: with its self rule revoked outside flow,
/// the plan refuses the Batch stack and gives the command that adds it.
#[test]
fn batch_p5_plan_judges_the_imported_efa_group_through_ec2() {
    let moto = Moto::start();
    let mut env = moto.env();
    env.push(("COLUMNS".into(), "400".into()));
    let l = Local::new("batch-p5.toml", env);
    // The VPC and the key: the Batch stack's parameters are then known.
    l.flow(
        &["apply"],
        &[
            "--auto-approve",
            "--target",
            "cluster.vpc",
            "--target",
            "cluster.ssh",
        ],
    )
    .expect(0);
    let group = l.output("cluster.vpc.SecurityGroup");
    assert!(group.starts_with("sg-"), "{group}");
    // The Batch stack plans with the group as the VPC stack made it.
    l.flow(&["plan"], &["--target", "cluster.batch"]).expect(0);
    moto.query_call(
        "ec2",
        &format!(
            "Action=RevokeSecurityGroupIngress&Version=2016-11-15&GroupId={group}&IpPermissions.1.IpProtocol=-1&IpPermissions.1.Groups.1.GroupId={group}"
        ),
    );
    let plan = l.flow(&["plan"], &["--target", "cluster.batch"]).expect(1);
    let all = plan.all();
    for wanted in [
        format!(
            "compute environment DistributedDeepLearningCE: EFA: security group {group} does not allow all traffic in from itself, which EFA needs"
        ),
        format!(
            "aws ec2 authorize-security-group-ingress --group-id {group} --protocol -1 --source-group {group}"
        ),
    ] {
        assert!(all.contains(&wanted), "{wanted}\nmissing from\n{all}");
    }
    assert_eq!(stack_status(&moto, "batch-p5-batch"), None);
}
