//! A custom AMI as a cluster step's image (issue 39, part 4): one workflow
//! builds an AMI with `ec2.image` (Debian's `ansible-playbook` on a builder
//! host, over the official ParallelCluster AMI as the reference
//! architectures build theirs) and makes a `parallelcluster.cluster` whose
//! compute queue's `Image.CustomAmi` is that image's id, through
//! `substitute`, with the real `pcluster` CLI. Every instance is a host:
//! the queue's static nodes are launched from its launch template (the
//! image pcluster put there), run slurmd, and hold what the playbook
//! installed; the head node and this machine's / do not.
//!
//! An edited playbook: the plan replaces the image and updates the
//! cluster; pcluster takes the queue's new image only with the compute
//! fleet stopped (`QUEUE_UPDATE_STRATEGY`), so flow stops it, updates,
//! starts it again, and clustermgtd relaunches the static nodes from the
//! new image (scripts/local-cloud/cloud_pcluster_fleet.py). Destroy
//! deletes the cluster, the image and its snapshot.

use std::path::Path;
use std::time::{Duration, Instant};

use super::hosts::{Hosts, ensure_installed, import_key_pair, keygen};
use super::https::Cloud;
use super::image::{captured, ec2, own_images, snapshots, snapshots_of};
use super::image_content::{TOOL_1, TOOL_2, on_this_machine};
use super::support::moto::between_all;
use super::support::{Run, pcluster, wait_until};

const CLUSTER: &str = include_str!("../fixtures/ami/cluster.yaml");

/// The workflow: the compute image, then the cluster on it.
fn workflow(source_ami: &str, subnet: &str) -> String {
    format!(
        r#"[workflow]
name = "image-cluster"
region = "us-east-1"

# The compute nodes' image, over the official ParallelCluster AMI.
[steps.node_image]
provider = "ec2.image"
[steps.node_image.inputs]
name = "flow-compute"
source_ami = "{source_ami}"
instance_type = "t3.micro"
playbooks = ["ansible/flow-tool.yml"]
ssh_interface = "private_ip"
ssh_timeout = 60

[steps.cluster]
provider = "parallelcluster.cluster"
[steps.cluster.inputs]
cluster_name = "flow-ami"
config = "cluster.yaml"
suppress_validators = ["ALL"]
stop_compute_fleet = true
substitute = {{ PLACEHOLDER_SUBNET = "{subnet}", PLACEHOLDER_SSH_KEY = "flow-key", PLACEHOLDER_NODE_AMI = "${{steps.node_image.outputs.image_id}}" }}
"#
    )
}

/// A running compute instance of the cluster, as EC2 describes it.
#[derive(Debug, Clone, PartialEq)]
struct Node {
    id: String,
    image: String,
    ip: String,
}

/// The cluster's running compute instances (ParallelCluster's tag).
fn computes(cloud: &Cloud) -> Vec<Node> {
    let xml = ec2(
        cloud,
        "Action=DescribeInstances\
         &Filter.1.Name=tag:parallelcluster:node-type&Filter.1.Value.1=Compute\
         &Filter.2.Name=instance-state-name&Filter.2.Value.1=running",
    );
    let first = |from: &str, tag: &str| {
        between_all(from, &format!("<{tag}>"), &format!("</{tag}>"))
            .into_iter()
            .next()
            .unwrap_or_default()
    };
    let mut out: Vec<Node> = Vec::new();
    for i in xml.split("<instanceId>").skip(1) {
        let id = i.split('<').next().unwrap_or_default().to_string();
        if !out.iter().any(|n| n.id == id) {
            out.push(Node {
                id,
                image: first(i, "imageId"),
                ip: first(i, "privateIpAddress"),
            });
        }
    }
    out
}

/// The official ParallelCluster AMI of alinux2023 on x86_64.
fn official_ami(cloud: &Cloud) -> String {
    let xml = ec2(
        cloud,
        "Action=DescribeImages&Owner.1=amazon\
         &Filter.1.Name=name&Filter.1.Value.1=aws-parallelcluster-*-amzn2023-hvm-x86_64*",
    );
    between_all(&xml, "<imageId>", "</imageId>")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no official ParallelCluster AMI: {xml}"))
}

/// What `flow-tool` and its configuration say on each of `nodes`, run
/// there by Slurm from the head node (`srun -w` the node at its address):
/// compute nodes have no key pair of their own on ParallelCluster, they
/// are reached through the head node.
fn tool_on(hosts: &Hosts, key: &Path, head_ip: &str, nodes: &[Node]) -> Vec<String> {
    let named = sinfo(hosts, key, head_ip);
    let head = hosts.at(head_ip).expect("the head node's host");
    nodes
        .iter()
        .map(|n| {
            let name = named
                .iter()
                .find_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.get(1) == Some(&n.ip.as_str())).then(|| f[0].to_string())
                })
                .unwrap_or_else(|| panic!("no Slurm node at {}: {named:?}", n.ip));
            let out = hosts.ssh(
                &head,
                key,
                &format!("srun -N 1 -w {name} sh -c 'flow-tool; cat /etc/flow-tool.conf' 2>&1"),
            );
            String::from_utf8_lossy(&out.stdout).replace('\n', ";")
        })
        .collect()
}

/// `sinfo -N` on the head node: "NODE ADDRESS STATE" lines.
fn sinfo(hosts: &Hosts, key: &Path, head_ip: &str) -> Vec<String> {
    let head = hosts.at(head_ip).expect("the head node's host");
    let out = hosts.ssh(&head, key, "sinfo -h -N -o '%N %o %T'");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn expect_ok(run: Run, what: &str) -> Run {
    assert_eq!(run.code, 0, "{what}: {}", run.all());
    run
}

#[test]
fn a_built_image_is_the_compute_queues_custom_ami_and_an_edited_playbook_moves_the_nodes_onto_a_new_one()
 {
    assert_eq!(
        on_this_machine(),
        Vec::<&str>::new(),
        "flow-tool is on this machine"
    );
    for (command, package) in [
        ("ansible-playbook", "ansible"),
        ("slurmctld", "slurmctld"),
        ("slurmd", "slurmd"),
        ("munged", "munge"),
        ("srun", "slurm-client"),
    ] {
        ensure_installed(command, package);
    }
    let started = Instant::now();
    let pcluster = pcluster::install();
    let hosts = Hosts::start();
    let _inside = hosts.enter();
    let cloud = Cloud::start(&[
        ("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy()),
        // clustermgtd's loop: each second, not each minute.
        ("FLOW_CLUSTERMGTD_LOOP_S", "1"),
        // clusterstatusmgtd's steps (STOP_REQUESTED → STOPPING → STOPPED):
        // a tenth of a second each, not each minute.
        ("FLOW_PCLUSTER_FLEET_STEP_S", "0.1"),
    ]);
    let ready = pcluster::prepare(&cloud);
    let mut a = cloud.aws();
    let key = keygen(a.p.path(), "flow-key");
    import_key_pair(&cloud, "flow-key", &key);
    a.env.push(("FLOW_PCLUSTER".into(), pcluster));
    a.p.write("cluster.yaml", CLUSTER);
    a.p.write("ansible/flow-tool.yml", TOOL_1);
    let source = official_ami(&cloud);
    a.p.write("wf.toml", &workflow(&source, &ready.subnet));
    let output = |key: &str| {
        expect_ok(a.run(&["output", "wf.toml", key]), key)
            .stdout
            .trim()
            .to_string()
    };

    // Apply: the image, then the cluster on it.
    let first = expect_ok(a.run(&["apply", "--auto-approve", "wf.toml"]), "apply");
    eprintln!("apply (image, cluster): {:?}", started.elapsed());
    assert_eq!(output("cluster.status"), "CREATE_COMPLETE");
    let image = output("node_image.image_id");
    assert_eq!(own_images(&cloud), std::slice::from_ref(&image));
    let mut image_snapshots = snapshots_of(&cloud, &image);
    assert_eq!(image_snapshots.len(), 1, "{image_snapshots:?}");
    let nodes = computes(&cloud);
    assert_eq!(nodes.len(), 2, "{nodes:?}\n{}", first.all());
    // EC2 says the nodes were launched from the built image.
    for n in &nodes {
        assert_eq!(n.image, image, "{nodes:?}");
    }
    // And they hold what the playbook installed.
    let head_ip = output("cluster.head_node_ip");
    for (n, seen) in nodes.iter().zip(tool_on(&hosts, &key, &head_ip, &nodes)) {
        assert_eq!(
            seen,
            format!(
                "flow-tool 1.0 (channel=stable) on ip-{}.ec2.internal;channel=stable;",
                n.ip.replace('.', "-")
            )
        );
    }
    // The head node, on the official AMI, has none of it.
    let head = hosts.at(&head_ip).expect("the head node's host");
    let on_head = hosts.ssh(&head, &key, "flow-tool 2>&1; cat /etc/flow-tool.conf 2>&1");
    let on_head = String::from_utf8_lossy(&on_head.stdout).into_owned();
    assert!(
        on_head.contains("flow-tool: command not found")
            && on_head.contains("/etc/flow-tool.conf: No such file or directory"),
        "{on_head}"
    );
    // Slurm runs jobs on them.
    let srun = hosts.ssh(&head, &key, "srun -N 2 flow-tool | sort");
    let srun = String::from_utf8_lossy(&srun.stdout).into_owned();
    assert_eq!(
        srun.lines()
            .filter(|l| l.starts_with("flow-tool 1.0 (channel=stable) on ip-"))
            .count(),
        2,
        "{srun}"
    );
    assert_eq!(on_this_machine(), Vec::<&str>::new());

    // The playbook edited: a new image, and the cluster updated for it.
    a.p.write("ansible/flow-tool.yml", TOOL_2);
    let started_update = Instant::now();
    let second = expect_ok(a.run(&["apply", "--auto-approve", "wf.toml"]), "update");
    let all = second.all();
    // The plan apply showed: the image replaced for its playbook, the
    // cluster updated because its `substitute` takes the new image's id.
    for line in [
        "-/+ node_image  (ec2.image)  replace — forced by `(content)`",
        "~ cluster     (parallelcluster.cluster)  update — inputs changed",
        "substitute = {\"PLACEHOLDER_NODE_AMI\":\"",
        "Plan: 0 to create, 1 to update, 1 to replace, 0 to delete",
    ] {
        assert!(second.stdout.contains(line), "{line}\n{all}");
    }
    assert!(
        second
            .stdout
            .contains(&format!("\"PLACEHOLDER_NODE_AMI\":\"{image}\"")),
        "{all}"
    );
    // pcluster refused the queue's new image with the fleet running;
    // flow stopped it, updated, started it again.
    let new_image = output("node_image.image_id");
    assert_ne!(new_image, image);
    for line in [
        "cluster `flow-ami`: stopping the compute fleet for the update".to_string(),
        format!(
            "cluster `flow-ami`: Scheduling.SlurmQueues[compute].Image.CustomAmi \"{image}\" → \"{new_image}\""
        ),
        "cluster `flow-ami`: starting the compute fleet again".to_string(),
    ] {
        assert!(all.contains(&line), "{line}\n{all}");
    }
    assert_eq!(own_images(&cloud), std::slice::from_ref(&new_image));
    image_snapshots.extend(snapshots_of(&cloud, &new_image));
    assert_eq!(output("cluster.status"), "UPDATE_COMPLETE");
    // clustermgtd relaunches the static nodes once the fleet runs: new
    // instances, from the new image, in service.
    let mut moved = Vec::new();
    wait_until(
        Duration::from_secs(60),
        "the nodes on the new image",
        || {
            moved = computes(&cloud);
            let back = moved.len() == 2
                && moved.iter().all(|n| n.image == new_image)
                && sinfo(&hosts, &key, &head_ip)
                    .iter()
                    .filter(|l| l.ends_with(" idle") && moved.iter().any(|n| l.contains(&n.ip)))
                    .count()
                    == 2;
            if !back {
                // Each look asks EC2 and the head node: not too often.
                std::thread::sleep(Duration::from_millis(300));
            }
            back
        },
    );
    eprintln!(
        "update (image, fleet stop, update, start, nodes back): {:?}",
        started_update.elapsed()
    );
    for n in &moved {
        assert!(!nodes.iter().any(|o| o.id == n.id), "{n:?} is an old node");
    }
    for (n, seen) in moved.iter().zip(tool_on(&hosts, &key, &head_ip, &moved)) {
        assert_eq!(
            seen,
            format!(
                "flow-tool 2.0 (channel=edge) on ip-{}.ec2.internal;channel=edge;",
                n.ip.replace('.', "-")
            )
        );
    }
    let replan = expect_ok(a.run(&["plan", "wf.toml"]), "re-plan");
    assert!(replan.stdout.contains("No changes."), "{}", replan.stdout);

    // Destroy: the cluster, the image and its snapshot.
    expect_ok(a.run(&["destroy", "--auto-approve", "wf.toml"]), "destroy");
    let stacks = cloud.query_call("cloudformation", "Action=DescribeStacks&Version=2010-05-15");
    assert!(
        !stacks.contains("<StackName>flow-ami</StackName>"),
        "the cluster's stack is left: {stacks}"
    );
    assert!(own_images(&cloud).is_empty(), "{:?}", own_images(&cloud));
    let left = snapshots(&cloud);
    for s in &image_snapshots {
        assert!(
            !left.contains(s),
            "snapshot {s} of a destroyed image is left"
        );
    }
    assert!(captured(&hosts).is_empty(), "{:?}", captured(&hosts));
    assert!(hosts.list().is_empty(), "destroy left {:?}", hosts.list());
    eprintln!("whole test: {:?}", started.elapsed());
}
