//! End-to-end: `parallelcluster.cluster` driving the official `pcluster`
//! (aws-parallelcluster 3.16.1, installed into .venv/pcluster by
//! `scripts/install-pcluster`) against moto, as far as moto carries it.
//!
//! The live cluster's tests (create to CREATE_COMPLETE, update through a
//! compute-fleet stop, refresh, import, destroy, kill -9 inside each) are in
//! e2e_pcluster/live.rs: moto's CloudFormation carries pcluster's template
//! with what scripts/local-cloud/cloud_pcluster_*.py adds.
//!
//! What the moto tests still leave out of the configuration pcluster gets:
//! - a `CapacityReservationTarget` (the plan test keeps it);
//! - the existing FSx for Lustre of `SharedStorage`.
//!
//! pcluster makes its own bucket with its TLS-only policy: the tests that
//! run it talk to the local cloud over HTTPS (e2e_pcluster/https.rs).
//!
//! Validators are suppressed there (`suppress_validators = ["ALL"]`): that
//! configuration names no official AMI, reservation or FSx the local cloud
//! has. The shipped workflows/pcluster-p5.toml runs with every validator on,
//! over HTTPS, on local hosts: e2e_pcluster/workflow.rs.

mod support;

// This binary uses part of the hosts harness (e2e_hosts uses the rest).
#[path = "e2e_pcluster/hang.rs"]
mod hang;
#[allow(dead_code)]
#[path = "support/hosts.rs"]
mod hosts;
#[path = "e2e_pcluster/https.rs"]
mod https;
#[path = "e2e_pcluster/job_replace.rs"]
mod job_replace;
#[path = "e2e_pcluster/job_replace_gone.rs"]
mod job_replace_gone;
#[path = "e2e_pcluster/live.rs"]
mod live;
#[path = "e2e_pcluster/node_replace.rs"]
mod node_replace;
#[path = "e2e_pcluster/planted.rs"]
mod planted;
#[path = "e2e_pcluster/policy.rs"]
mod policy;
#[path = "e2e_pcluster/slurm_hosts.rs"]
mod slurm_hosts;
#[path = "e2e_pcluster/workflow.rs"]
mod workflow;

use support::Project;
use support::moto::Moto;

/// `scripts/install-pcluster`: pcluster's path (installing it once).
fn pcluster() -> String {
    support::pcluster::install()
}

/// Moves this thread into the hosts' sealed namespace, pcluster installed
/// first: nothing inside can reach the package index.
fn enter(hosts: &hosts::Hosts) -> hosts::Inside {
    pcluster();
    hosts.enter()
}

const CONFIG: &str = include_str!("fixtures/pcluster/cluster.yaml");

/// The workflow: the p5 configuration with its placeholders filled.
fn workflow(substitute: &str) -> String {
    format!(
        r#"
[workflow]
name = "pcluster"
region = "us-east-1"

[steps.cluster]
provider = "parallelcluster.cluster"
[steps.cluster.inputs]
cluster_name = "flow-p5"
config = "cluster.yaml"
suppress_validators = ["ALL"]
substitute = {{ {substitute} }}
"#
    )
}

const PLAN_VALUES: &str = r#"PLACEHOLDER_AMI = "ami-0123456789abcdef0", PLACEHOLDER_PUBLIC_SUBNET = "subnet-0a", PLACEHOLDER_PRIVATE_SUBNET = "subnet-0b", PLACEHOLDER_SSH_KEY = "ml", PLACEHOLDER_MIN_INSTANCES = "0", PLACEHOLDER_MAX_INSTANCES = "2", PLACEHOLDER_CAPACITY_RESERVATION_ID = "cr-0123456789abcdef0", PLACEHOLDER_FSX_ID = "fs-0123456789abcdef0""#;

#[test]
fn the_plan_shows_queues_counts_and_the_cost_at_most() {
    let p = Project::new();
    p.write("cluster.yaml", CONFIG);
    p.write("wf.toml", &workflow(PLAN_VALUES));
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    let out = plan.stdout;
    for line in [
        "head node: m5.8xlarge (alinux2023, slurm)",
        "queue compute-gpu: distributed-ml p5.48xlarge × 0–2 (ONDEMAND, EFA, placement group, reservation cr-0123456789abcdef0)",
        "shared storage: FsxLustre at /fsx (fs-0123456789abcdef0)",
    ] {
        assert!(out.contains(line), "plan lacks {line:?}:\n{out}");
    }
    // Priced at most: the head node and both p5 nodes.
    assert!(out.contains("2 × p5.48xlarge"), "{out}");
    assert!(out.contains("1 × m5.8xlarge"), "{out}");
    // A sensitive value filled into the configuration is masked in the
    // lines the provider reads from it, as everywhere else.
    let secret_wf = workflow(&PLAN_VALUES.replace(
        r#"PLACEHOLDER_CAPACITY_RESERVATION_ID = "cr-0123456789abcdef0""#,
        r#"PLACEHOLDER_CAPACITY_RESERVATION_ID = "${vars.reservation}""#,
    ))
    .replace(
        "[steps.cluster]",
        "[vars.reservation]\nsensitive = true\ndefault = \"cr-0fedcba9876543210\"\n\n[steps.cluster]",
    );
    p.write("wf.toml", &secret_wf);
    let plan = p.run(&["plan", "wf.toml"]).expect(0);
    assert!(
        !plan.all().contains("cr-0fedcba9876543210"),
        "{}",
        plan.all()
    );
    assert!(
        plan.stdout.contains("reservation (sensitive))"),
        "{}",
        plan.stdout
    );
}

#[test]
fn placeholders_left_unfilled_are_refused_before_anything_runs() {
    let p = Project::new();
    p.write("cluster.yaml", CONFIG);
    p.write(
        "wf.toml",
        &workflow(r#"PLACEHOLDER_AMI = "ami-0123456789abcdef0""#),
    );
    let run = p.run(&["plan", "wf.toml"]).expect(1);
    let all = run.all();
    assert!(
        all.contains(
            "cluster.yaml:45:36: the placeholder `PLACEHOLDER_CAPACITY_RESERVATION_ID` has"
        ),
        "{all}"
    );
    assert!(all.contains("wf.toml:"), "{all}");
    assert!(p.state_files().is_empty());
}

/// A moto prepared for pcluster, and the values to fill the configuration
/// with (no capacity reservation and no existing FSx: moto cannot describe
/// either).
fn prepared(moto: &Moto) -> (String, String) {
    let ready = support::pcluster::prepare(moto);
    let values = format!(
        r#"PLACEHOLDER_AMI = "{ami}", PLACEHOLDER_PUBLIC_SUBNET = "{subnet}", PLACEHOLDER_PRIVATE_SUBNET = "{subnet}", PLACEHOLDER_SSH_KEY = "flow-test", PLACEHOLDER_MIN_INSTANCES = "0", PLACEHOLDER_MAX_INSTANCES = "2""#,
        ami = ready.ami,
        subnet = ready.subnet,
    );
    (ready.pcluster, values)
}

/// The p5 configuration without what moto cannot describe.
fn moto_config() -> String {
    let without_reservation = CONFIG.replace(
        "          CapacityReservationTarget:\n            CapacityReservationId: PLACEHOLDER_CAPACITY_RESERVATION_ID\n",
        "",
    );
    let cut = without_reservation
        .find("SharedStorage:")
        .expect("storage section");
    without_reservation[..cut].to_string()
}

#[test]
fn a_configuration_pcluster_refuses_is_named_by_file_line_and_column() {
    let moto = https::Cloud::start(&[]);
    let (pcluster, values) = prepared(&moto);
    let a = moto.aws();
    a.p.write(
        "cluster.yaml",
        &moto_config().replace("InstanceType: p5.48xlarge", "InstanceTyp: p5.48xlarge"),
    );
    a.p.write("wf.toml", &workflow(&values));
    let mut env = a.env.clone();
    env.push(("FLOW_PCLUSTER".into(), pcluster));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let run =
        a.p.run_env(&["apply", "--auto-approve", "wf.toml"], &env)
            .expect(1);
    let all = run.all();
    // The unknown key's own line and column in cluster.yaml.
    let line = moto_config()
        .lines()
        .position(|l| l.contains("InstanceType: p5.48xlarge"))
        .unwrap()
        + 1;
    assert!(
        all.contains(&format!(
            "cluster.yaml:{line}:11: Scheduling.SlurmQueues[0].ComputeResources[0].InstanceTyp: Unknown field."
        )),
        "{all}"
    );
    // pcluster validates before it makes anything: no intent is kept.
    let show =
        a.p.run_env(&["state", "show", "wf.toml", "cluster"], &env)
            .expect(0);
    let rec: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert!(rec["in_flight"].is_null(), "{rec}");
    assert_eq!(rec["applied"], false);
}

#[test]
fn a_missing_pcluster_is_one_line_naming_how_to_install_it() {
    let p = Project::new();
    p.write("cluster.yaml", CONFIG);
    p.write("wf.toml", &workflow(PLAN_VALUES));
    // Credentials are there (flow checks them before any step runs, and
    // they are not what this test is about); instance metadata is off, so
    // nothing is asked of an address outside this machine.
    let run = p
        .run_env(
            &["apply", "--auto-approve", "wf.toml"],
            &[
                ("FLOW_PCLUSTER", "/nonexistent/pcluster"),
                ("AWS_ACCESS_KEY_ID", "testing"),
                ("AWS_SECRET_ACCESS_KEY", "testing"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
        )
        .expect(1);
    let all = run.all();
    assert!(
        all.contains("`/nonexistent/pcluster` is not installed (not found)"),
        "{all}"
    );
    assert!(all.contains("scripts/install-pcluster"), "{all}");
}

/// workflows/pcluster-p5.toml as a user plans it on a fresh machine (no AWS
/// account): every step to create, the cluster's queues and its cost at
/// most from the published configuration, the Slurm jobs on the head node.
#[test]
fn the_pcluster_p5_workflow_plans_offline() {
    let p = Project::new();
    let wf = support::workspace_root().join("workflows/pcluster-p5.toml");
    let wf = wf.to_string_lossy().into_owned();
    let state = p.path().join("state").to_string_lossy().into_owned();
    let vars = [
        "--var",
        "key_name=ml",
        "--var",
        "capacity_reservation_id=cr-0123456789abcdef0",
    ];
    let mut args = vec!["validate", wf.as_str()];
    args.extend(vars);
    p.run(&args).expect(0);
    let mut args = vec![
        "plan",
        wf.as_str(),
        "--state-dir",
        &state,
        "--refresh=false",
    ];
    args.extend(vars);
    let plan = p.run_env(&args, &[("AWS_REGION", "us-east-1")]).expect(0);
    let out = plan.stdout;
    // Offline: nothing looked at a real object, and nothing says it could not.
    assert!(!plan.stderr.contains("could not look"), "{}", plan.stderr);
    assert!(!out.contains("could not look"), "{out}");
    for line in [
        "+ cluster    (parallelcluster.cluster)  create",
        "at most ≈ $220.93/h, at least ≈ $0.77/h (1 × m5.4xlarge, 0–4 × p5.48xlarge)",
        "Cost: this plan starts at most ≈ $221.27/h, at least ≈ $1.11/h",
        "queue compute-gpu: p5 p5.48xlarge × 0–4 (ONDEMAND, EFA, placement group, reservation (known after apply))",
        "shared storage: FsxLustre at /fsx ((known after apply))",
        "+ nccl       (slurm.job)  create",
        "+ ddp_setup  (slurm.job)  create",
        "+ train      (slurm.job)  create",
        "Plan: 7 to create",
    ] {
        assert!(out.contains(line), "plan lacks {line:?}:\n{out}");
    }
}

/// The EFA rules of the queue only EC2 can answer, at plan: its two subnets
/// in two zones, and a security group of its own (replacing pcluster's)
/// that does not let itself in; the plan refuses both and names the fix.
#[test]
fn the_plan_asks_ec2_for_the_efa_queues_zones_and_groups() {
    let moto = Moto::start();
    moto.capacity_reservation(
        "cr-0123456789abcdef0",
        "p5.48xlarge",
        "us-east-1a",
        2,
        false,
        None,
    );
    let ec2 = |params: &str| moto.query_call("ec2", &format!("{params}&Version=2016-11-15"));
    let first = |xml: &str, tag: &str| {
        support::moto::between_all(xml, &format!("<{tag}>"), &format!("</{tag}>"))
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
    };
    let vpc = first(&ec2("Action=CreateVpc&CidrBlock=10.9.0.0/16"), "vpcId");
    let subnet = |cidr: &str, zone: &str| {
        first(
            &ec2(&format!(
                "Action=CreateSubnet&VpcId={vpc}&CidrBlock={cidr}&AvailabilityZone={zone}"
            )),
            "subnetId",
        )
    };
    let (a, b) = (
        subnet("10.9.1.0/24", "us-east-1a"),
        subnet("10.9.2.0/24", "us-east-1b"),
    );
    let group = first(
        &ec2(&format!(
            "Action=CreateSecurityGroup&GroupName=efa-open&GroupDescription=efa&VpcId={vpc}"
        )),
        "groupId",
    );
    let p = Project::new();
    p.write(
        "cluster.yaml",
        &CONFIG.replace(
            "          - PLACEHOLDER_PRIVATE_SUBNET\n",
            &format!(
                "          - PLACEHOLDER_PRIVATE_SUBNET\n          - {b}\n        SecurityGroups: [{group}]\n"
            ),
        ),
    );
    p.write("wf.toml", &workflow(&PLAN_VALUES.replace("subnet-0b", &a)));
    let mut env = moto.env();
    env.push(("COLUMNS".into(), "400".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(1);
    let all = plan.all();
    for wanted in [
        format!(
            "queue compute-gpu: EFA: the subnets span 2 Availability Zones ({a} in us-east-1a, {b} in us-east-1b); EFA traffic does not cross zones"
        ),
        format!(
            "queue compute-gpu: EFA: security group {group} does not allow all traffic in from itself, which EFA needs"
        ),
        format!(
            "aws ec2 authorize-security-group-ingress --group-id {group} --protocol -1 --source-group {group}"
        ),
    ] {
        assert!(all.contains(&wanted), "{wanted}\nmissing from\n{all}");
    }
    assert!(p.state_files().is_empty());
}
