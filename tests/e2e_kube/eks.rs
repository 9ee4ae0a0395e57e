//! EKS: a cluster and its node groups from an eksctl file (against moto),
//! and the EKS connection a token webhook authenticates.

use crate::fixture;
use crate::support::Project;
use crate::support::kube::KubeServer;
use crate::support::moto::Moto;

/// An eksctl ClusterConfig becomes a cluster plus its managed node groups
/// on moto; plan shows what eksctl would have done; a separate
/// eks.nodegroup gets a p5 EFA launch template with 32 interfaces; destroy
/// removes node groups before the cluster.
#[test]
fn eksctl_config_becomes_a_cluster_with_node_groups() {
    let moto = Moto::start();
    // The reservation the fixture's p4d group names (the plan reads it).
    moto.capacity_reservation(
        "cr-0123456789abcdef0",
        "p4d.24xlarge",
        "us-east-1a",
        4,
        false,
        None,
    );
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let p = Project::new();
    fixture(&p, "cluster.yaml");
    p.write(
        "wf.toml",
        r#"
[workflow]
name = "eks"
region = "us-east-1"

[steps.cluster]
provider = "eks.cluster"
[steps.cluster.inputs]
eksctl_config = "cluster.yaml"

[steps.p5]
provider = "eks.nodegroup"
[steps.p5.inputs]
cluster = "${steps.cluster.outputs.name}"
name = "p5"
instance_types = ["p5.48xlarge"]
subnet_ids = ["subnet-0b"]
desired_size = 1
max_size = 2
efa = true
node_role_arn = "arn:aws:iam::123456789012:role/nodes"
"#,
    );
    let plan = p.run_env(&["plan", "wf.toml"], &env).expect(0);
    for line in [
        "+ stack flow-eks-dlc-p4d-role (cluster IAM service role)",
        "+ cluster dlc-p4d (Kubernetes 1.33, subnets subnet-0a,subnet-0b, public and private endpoint)",
        "+ stack flow-eks-dlc-p4d-oidc (IAM OIDC provider",
        "+ managed node group p4d: p4d.24xlarge × 2..4 (desired 2); EFA: 4 interfaces per node; capacity reservation cr-0123456789abcdef0",
        "`addons` is not acted on",
    ] {
        assert!(
            plan.stdout.contains(line),
            "{line} missing from\n{}",
            plan.stdout
        );
    }
    let apply = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(apply.stdout.contains("2 created"), "{}", apply.all());
    let (status, body) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups", "");
    assert_eq!(status, 200, "{body}");
    for ng in ["sys", "p4d", "p5"] {
        assert!(body.contains(&format!("\"{ng}\"")), "{ng} missing: {body}");
    }
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 2);
    assert_eq!(
        p4d["nodegroup"]["subnets"],
        serde_json::json!(["subnet-0b"])
    );
    let lt = p4d["nodegroup"]["launchTemplate"]["id"]
        .as_str()
        .expect("launch template")
        .to_string();
    let xml = moto.query_call(
        "ec2",
        &format!("Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId={lt}"),
    );
    assert_eq!(
        xml.matches("<interfaceType>efa</interfaceType>").count(),
        4,
        "{xml}"
    );
    assert!(xml.contains("cr-0123456789abcdef0"), "{xml}");
    let p5_lt = p
        .run_env(&["output", "wf.toml", "p5.launch_template_id"], &env)
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let xml = moto.query_call(
        "ec2",
        &format!(
            "Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateId={p5_lt}"
        ),
    );
    assert_eq!(
        xml.matches("<interfaceType>efa</interfaceType>").count(),
        32
    );
    assert_eq!(
        p.run_env(&["output", "wf.toml", "p5.efa_interfaces"], &env)
            .expect(0)
            .stdout
            .trim(),
        "32"
    );
    let conn = p
        .run_env(&["output", "wf.toml", "cluster.connection", "--json"], &env)
        .expect(0);
    assert!(conn.stdout.contains("\"endpoint\""), "{}", conn.stdout);
    assert!(
        moto.stacks().contains(&"flow-eks-dlc-p4d-role".to_string()),
        "{:?}",
        moto.stacks()
    );

    // Scaling the separate node group is an in-place update.
    let plan = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    assert!(plan.stdout.contains("No changes"), "{}", plan.stdout);

    // A node group of the eksctl file scaled in the console is drift of the
    // cluster step; apply scales it back to the file.
    let (status, body) = moto.rest_call(
        "eks",
        "POST",
        "/clusters/dlc-p4d/node-groups/p4d/update-config",
        r#"{"scalingConfig": {"minSize": 2, "desiredSize": 3, "maxSize": 4}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let plan = p
        .run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(2);
    assert!(
        plan.stdout
            .contains("node group p4d scaling (min, desired, max) : [2,2,4] → [2,3,4]"),
        "{}",
        plan.stdout
    );
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 2);
    p.run_env(&["plan", "wf.toml", "--detailed-exitcode"], &env)
        .expect(0);
    let wf = p
        .read("wf.toml")
        .replace("desired_size = 1", "desired_size = 2");
    p.write("wf.toml", &wf);
    let up = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(up.stdout.contains("1 updated"), "{}", up.all());
    let (_, p5) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p5", "");
    assert!(
        p5.contains("\"desiredSize\": 2") || p5.contains("\"desiredSize\":2"),
        "{p5}"
    );

    // The eksctl file changed (p4d scaled, sys dropped) with an input
    // change that makes the engine plan an update: the cluster step reads
    // the file as it is now.
    let cfg = p
        .read("cluster.yaml")
        .replace("    desiredCapacity: 2\n", "    desiredCapacity: 3\n");
    let cfg = cfg.replace(
        "  - name: sys\n    instanceType: c5.2xlarge\n    desiredCapacity: 1\n    privateNetworking: true\n",
        "",
    );
    p.write("cluster.yaml", &cfg);
    let wf = p.read("wf.toml").replace(
        "eksctl_config = \"cluster.yaml\"",
        "eksctl_config = \"cluster.yaml\"\ntags = { env = \"test\" }",
    );
    p.write("wf.toml", &wf);
    let up = p
        .run_env(&["apply", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(up.stdout.contains("1 updated"), "{}", up.all());
    // The p5 group's `cluster` input was known only after the cluster's
    // update: planned as a replacement if it changed, it did not, and the
    // group was left alone (no API server runs here to drain it).
    assert!(
        up.stdout
            .contains("forced by `cluster` if it changes (known after apply)"),
        "{}",
        up.all()
    );
    assert!(!up.stdout.contains("replaced"), "{}", up.all());
    let (_, groups) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups", "");
    assert!(!groups.contains("\"sys\""), "sys was not removed: {groups}");
    let (_, p4d) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d/node-groups/p4d", "");
    let p4d: serde_json::Value = serde_json::from_str(&p4d).unwrap();
    assert_eq!(p4d["nodegroup"]["scalingConfig"]["desiredSize"], 3);
    assert_eq!(
        p4d["nodegroup"]["launchTemplate"]["id"].as_str(),
        Some(lt.as_str()),
        "scaling replaced the node group"
    );
    let (_, cluster) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d", "");
    assert!(
        cluster.contains("\"env\": \"test\"") || cluster.contains("\"env\":\"test\""),
        "{cluster}"
    );

    let d = p
        .run_env(&["destroy", "wf.toml", "--auto-approve"], &env)
        .expect(0);
    assert!(d.stdout.contains("2 deleted"), "{}", d.all());
    let (status, _) = moto.rest_call("eks", "GET", "/clusters/dlc-p4d", "");
    assert_eq!(status, 404);
    assert!(
        moto.stacks().iter().all(|s| !s.starts_with("flow-eks-")),
        "{:?}",
        moto.stacks()
    );
}

/// An EKS connection: the `eks.cluster` step's name, and a token presigned
/// from the AWS credentials, accepted by an API server that authenticates
/// EKS tokens as EKS does (a token webhook calling STS, here moto's).
///
/// The token goes only where DescribeCluster says the cluster is: a
/// `cluster` input naming another endpoint (here the test API server) gets
/// nothing, the server sees no token. The loopback stand-in
/// `FLOW_EKS_API_SERVER` is what reaches the test server; a stand-in that
/// is not loopback is refused before any token is made.
#[test]
fn eks_connection_authenticates_with_a_signed_token() {
    let moto = Moto::start();
    let k = KubeServer::start_with(crate::support::kube::Options {
        eks_sts: Some(moto.addr),
        eks_cluster: "dlc".into(),
    });
    let moto_env = moto.env();
    let env: Vec<(&str, &str)> = moto_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let p = Project::new();
    let ca_file = p.write("api-server-ca.pem", &k.ca_pem);
    let ca_file = ca_file.to_string_lossy();
    p.write(
        "wf.toml",
        &format!(
            r#"
[workflow]
name = "eks-conn"
region = "us-east-1"

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "dlc"
subnet_ids = ["subnet-0a", "subnet-0b"]
role_arn = "arn:aws:iam::123456789012:role/eks"

# A connection whose endpoint is not the one EKS describes for `dlc`.
[steps.etcd]
provider = "kube.manifest"
timeout = "20s"
[steps.etcd.inputs]
cluster = {{ name = "${{steps.eks.outputs.name}}", endpoint = "{url}", certificate_authority = "{ca}", region = "us-east-1" }}
namespace = "default"
manifest = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: etcd-config}}
data: {{cluster: "${{steps.eks.outputs.name}}"}}
"""
"#,
            url = k.url,
            ca = k.ca_base64()
        ),
    );
    // moto's cluster has no API server at the endpoint it describes: the
    // apply fails there, and the test server never saw a token.
    let elsewhere = p.run_env(&["apply", "wf.toml", "--auto-approve"], &env);
    assert_ne!(elsewhere.code, 0, "{}", elsewhere.all());
    let (_, described) = moto.rest_call("eks", "GET", "/clusters/dlc", "");
    let described: serde_json::Value = serde_json::from_str(&described).unwrap();
    let described = described["cluster"]["endpoint"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!described.contains("127.0.0.1"), "{described}");
    assert!(
        k.eks_identities().is_empty(),
        "the token reached the endpoint the input named: {:?}",
        k.eks_identities()
    );
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/etcd-config")
            .is_none()
    );

    let refused = p
        .run_env(
            &["apply", "wf.toml", "--auto-approve"],
            &[
                env.clone(),
                vec![
                    ("FLOW_EKS_API_SERVER", "https://10.9.8.7:6443"),
                    ("FLOW_EKS_API_SERVER_CA", &ca_file),
                ],
            ]
            .concat(),
        )
        .expect(1);
    assert!(
        refused
            .all()
            .contains("FLOW_EKS_API_SERVER=https://10.9.8.7:6443 is not a loopback address"),
        "{}",
        refused.all()
    );
    assert!(k.eks_identities().is_empty());

    let stand_in = [
        env.clone(),
        vec![
            ("FLOW_EKS_API_SERVER", k.url.as_str()),
            ("FLOW_EKS_API_SERVER_CA", &ca_file),
        ],
    ]
    .concat();
    p.run_env(&["apply", "wf.toml", "--auto-approve"], &stand_in)
        .expect(0);
    let cm = k
        .get("/api/v1/namespaces/default/configmaps/etcd-config")
        .expect("applied through the EKS token");
    assert_eq!(cm["data"]["cluster"], "dlc");
    let who = k.eks_identities();
    assert!(
        !who.is_empty() && who.iter().all(|a| a.starts_with("arn:aws:")),
        "{who:?}"
    );
    p.run_env(&["destroy", "wf.toml", "--auto-approve"], &stand_in)
        .expect(0);
    assert!(
        k.get("/api/v1/namespaces/default/configmaps/etcd-config")
            .is_none()
    );
}
