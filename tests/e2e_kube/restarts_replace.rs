//! kube.job restarts with `policy = "replace"` (issue 40 item 4, EKS) on a
//! node group flow made: moto's Auto Scaling group launches the instances,
//! the test kubelets (support/kube/kubelets.rs) register them as Nodes and
//! remove the Node of a terminated one, and every AWS call goes through
//! the fault proxy, whose log is what the test counts. A node dies under
//! the training: flow cordons it (Kubernetes' word: NotReady), terminates
//! its instance through its group without lowering the desired count,
//! waits for the group's new Ready node, and only then starts attempt 2,
//! which runs without the dead node.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::nodegroup_replace::cluster_and_group;
use crate::fixture;
use crate::support::fault_proxy::FaultProxy;
use crate::support::kube::KubeServer;
use crate::support::kube::kubelets::Kubelets;
use crate::support::kube::training::stop_kubelet;
use crate::support::moto::Moto;
use crate::support::{Project, finish, wait_until};

const NODES: usize = 5;

/// The Ready nodes of group `gpu`, sorted by name.
pub(super) fn ready_nodes(k: &KubeServer) -> Vec<Value> {
    let all = k.get("/api/v1/nodes").unwrap_or_default();
    let mut nodes: Vec<Value> = all["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == "gpu")
        .filter(|n| {
            n["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .collect();
    nodes.sort_by_key(|n| {
        n["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    nodes
}

/// The pods of job `job`.
pub(super) fn pods(k: &KubeServer, job: &str) -> Vec<Value> {
    k.get(&format!(
        "/api/v1/namespaces/default/pods?labelSelector=training.kubeflow.org/job-name={job}"
    ))
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
}

/// The nodes job `job`'s pods were bound to, sorted.
pub(super) fn nodes_of(k: &KubeServer, job: &str) -> Vec<String> {
    let mut n: Vec<String> = pods(k, job)
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        .collect();
    n.sort();
    n
}

/// The operator and the training step, `restarts = 1`, `policy =
/// "replace"`, after the node group's steps.
pub(super) fn train_steps(kubeconfig: &str) -> String {
    format!(
        r#"
[steps.operator]
provider = "kube.manifest"
depends_on = ["ng"]
[steps.operator.inputs]
kubeconfig = "{kc}"
files = ["pytorchjob-crd.yaml"]

[steps.train]
provider = "kube.job"
depends_on = ["operator"]
[steps.train.inputs]
kubeconfig = "{kc}"
files = ["train.yaml"]
restarts = 1
policy = "replace"
replace_timeout = "2m"
"#,
        kc = kubeconfig
    )
}

#[test]
fn policy_replace_terminates_the_dead_nodes_instance_before_attempt_2() {
    let moto = Moto::start();
    let proxy = FaultProxy::start(moto.addr);
    let env = moto.env_for(&proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let k = KubeServer::start();
    k.driver().schedule();
    let p = Project::new();
    let kubelets = Kubelets::new("dlc");
    fixture(&p, "pytorchjob-crd.yaml");
    let fsx = p.path().join("fsx");
    std::fs::create_dir_all(&fsx).unwrap();
    p.write(
        "train.yaml",
        &super::restarts::TRAIN.replace("HOST_DIR", &fsx.to_string_lossy()),
    );
    std::thread::scope(|scope| {
        let _kubelets = kubelets.watch(scope, &moto, &k);
        let infra = cluster_and_group("p4d.24xlarge", NODES);
        p.write("wf.toml", &infra);
        p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
            .expect(0);
        wait_until(Duration::from_secs(30), "the group's nodes", || {
            ready_nodes(&k).len() == NODES
        });
        let train = train_steps(&k.kubeconfig_path());
        p.write("wf.toml", &format!("{infra}{train}"));
        let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0).all();
        assert!(
            plan.contains("its EC2 instance terminated through its Auto Scaling group (desired count kept) and the new node waited for"),
            "{plan}"
        );
        k.driver().hold("train");
        let from = proxy.calls().len();
        let mut c = p.cmd(&["apply", "wf.toml", "--auto-approve"]);
        c.envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().expect("spawn flow");
        wait_until(Duration::from_secs(60), "train's 4 pods running", || {
            let pods = pods(&k, "train");
            pods.len() == 4 && pods.iter().all(|p| p["status"]["phase"] == "Running")
        });
        let before: Vec<String> = ready_nodes(&k)
            .iter()
            .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        let dead = nodes_of(&k, "train")[2].clone();
        let dead_node = k.get(&format!("/api/v1/nodes/{dead}")).unwrap();
        let dead_instance = dead_node["spec"]["providerID"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        let died = Instant::now();
        stop_kubelet(&k, &dead);
        let run = finish(child).expect(0);
        println!(
            "node death to attempt 2 done, its instance replaced through the group: {:.1} s",
            died.elapsed().as_secs_f64()
        );
        let terminations: Vec<_> = proxy
            .calls_from(from)
            .into_iter()
            .filter(|c| c.op == "TerminateInstanceInAutoScalingGroup" && c.sent.is_some())
            .collect();
        assert_eq!(terminations.len(), 1, "one termination: {}", run.all());
        let out = p
            .run_env(&["output", "wf.toml", "train.attempts", "--json"], &env)
            .expect(0);
        let attempts: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let replaced = &attempts[0]["replaced"][0];
        assert_eq!(replaced["node"], json!(dead), "{attempts}");
        assert_eq!(replaced["instance"], json!(dead_instance), "{attempts}");
        let new_node = replaced["new_node"]
            .as_str()
            .expect("the new node")
            .to_string();
        assert!(!before.contains(&new_node), "{new_node} is new: {before:?}");
        assert_eq!(attempts[0]["cordoned"], json!([dead]));
        // The dead node left with its instance; attempt 2 ran without it.
        assert!(k.get(&format!("/api/v1/nodes/{dead}")).is_none());
        let second = nodes_of(&k, "train-a2");
        assert_eq!(second.len(), 4, "{second:?}");
        assert!(!second.contains(&dead), "{second:?}");
        assert_eq!(
            ready_nodes(&k).len(),
            NODES,
            "the group is at strength again"
        );
        let l = crate::log(&p, "train");
        let at = |t: &str| {
            l.find(t)
                .unwrap_or_else(|| panic!("{t:?} not in the step's log:\n{l}"))
        };
        assert!(
            at(&format!(
                "terminated instance {dead_instance} of node {dead}"
            )) < at("started PyTorchJob default/train-a2"),
            "the replacement before attempt 2:\n{l}"
        );
    });
}
