//! EKS authentication as on AWS: flow reaches the cluster at the endpoint
//! and CA DescribeCluster answers (the test cloud answers with the real
//! kube-apiserver's, `KubeServer::describe_in_eks`), with no
//! `FLOW_EKS_API_SERVER`, and the API server's token webhook verifies the
//! presigned STS token as aws-iam-authenticator and STS do
//! (tests/support/kube/eks_token.rs). A token signed with other
//! credentials, presented after its 15 minutes, signed for another
//! cluster, or altered on its way is refused, and flow's error names the
//! cluster and says how to refresh the credentials.

use std::time::Duration;

use crate::support::Project;
use crate::support::kube::{KubeServer, Options};
use crate::support::moto::Moto;

/// The cluster the workflow makes and reaches.
const CLUSTER: &str = "dlc";

/// The ConfigMap's API path.
const CONFIG_MAP: &str = "/api/v1/namespaces/default/configmaps/etcd-config";

/// What the webhook lets the test cloud's credentials in as.
const ARN: &str = "arn:aws:iam::123456789012:user/flow-e2e";

/// A test cloud whose EKS describes `dlc` with a real API server, which
/// is the cluster `server_cluster` to its token webhook.
struct Cloud {
    moto: Moto,
    k: KubeServer,
    p: Project,
    env: Vec<(String, String)>,
}

impl Cloud {
    fn start(server_cluster: &str) -> Cloud {
        let moto = Moto::start();
        let k = KubeServer::start_with(Options {
            eks_sts: Some(moto.addr),
            eks_cluster: server_cluster.into(),
        });
        k.describe_in_eks(CLUSTER);
        let env = moto.env();
        assert!(env.iter().all(|(k, _)| !k.starts_with("FLOW_EKS")));
        let p = Project::new();
        p.write("wf.toml", &workflow("dlc"));
        Cloud { moto, k, p, env }
    }

    /// `flow ARGS` with the cloud's environment and `extra` over it.
    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> crate::support::Run {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        self.p.run_env(args, &env)
    }

    fn apply(&self, extra: &[(&str, &str)]) -> crate::support::Run {
        self.run(&["apply", "wf.toml", "--auto-approve"], extra)
    }

    /// Applies with a token the webhook refuses: flow fails on the
    /// ConfigMap with the cluster's name and the fix, nothing reached the
    /// cluster, and the webhook's reason starts with `reason`.
    fn refused(&self, extra: &[(&str, &str)], reason: &str) -> String {
        let run = self.apply(extra).expect(1);
        let out = run.all();
        for part in [
            "EKS cluster `dlc` refused flow's token: its API server https://127.0.0.1:",
            "(as DescribeCluster gives it in us-east-1) answered 401 Unauthorized",
            "refresh the credentials (`aws sso login`, `aws configure`, or new AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN",
            "`aws eks list-access-entries --cluster-name dlc`",
        ] {
            assert!(out.contains(part), "{part:?} missing from\n{out}");
        }
        assert!(self.k.get(CONFIG_MAP).is_none());
        assert!(
            self.k.eks_identities().is_empty(),
            "{:?}",
            self.k.eks_identities()
        );
        let refusals = self.k.eks_refusals();
        assert!(
            !refusals.is_empty() && refusals.iter().all(|r| r.starts_with(reason)),
            "{reason}: {refusals:?}"
        );
        out
    }
}

/// The workflow: the cluster, and a ConfigMap applied through its
/// `connection` output (name, endpoint, CA, region).
fn workflow(value: &str) -> String {
    format!(
        r#"
[workflow]
name = "eks-auth"
region = "us-east-1"

[steps.eks]
provider = "eks.cluster"
[steps.eks.inputs]
name = "{CLUSTER}"
subnet_ids = ["subnet-0a", "subnet-0b"]
role_arn = "arn:aws:iam::123456789012:role/eks"

[steps.etcd]
provider = "kube.manifest"
timeout = "30s"
[steps.etcd.inputs]
cluster = "${{steps.eks.outputs.connection}}"
namespace = "default"
manifest = """
apiVersion: v1
kind: ConfigMap
metadata: {{name: etcd-config}}
data: {{value: "{value}"}}
"""
"#
    )
}

/// An EKS step reaches the cluster as on AWS: the endpoint and CA are
/// DescribeCluster's, the token is let in as the named user
/// `flow-e2e-admin` (whose group RBAC binds to cluster-admin, not
/// `system:masters`: with the binding gone, the same token is forbidden).
#[test]
fn eks_steps_reach_the_cluster_describe_cluster_names() {
    let c = Cloud::start(CLUSTER);
    c.apply(&[]).expect(0);
    let (_, described) = c.moto.rest_call("eks", "GET", "/clusters/dlc", "");
    let described: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(described["cluster"]["endpoint"], c.k.url.as_str());
    assert_eq!(
        described["cluster"]["certificateAuthority"]["data"],
        c.k.ca_base64().as_str()
    );
    let cm = c.k.get(CONFIG_MAP).expect("applied through the EKS token");
    assert_eq!(cm["data"]["value"], "dlc");
    let who = c.k.eks_identities();
    assert!(!who.is_empty() && who.iter().all(|a| a == ARN), "{who:?}");
    assert!(c.k.eks_refusals().is_empty(), "{:?}", c.k.eks_refusals());

    // The token is authenticated, and RBAC decides what its user may do.
    c.k.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/flow-e2e-admins");
    c.p.write("wf.toml", &workflow("changed"));
    // (Without --refresh=false the refresh stops first, on the same 403.)
    let forbidden = c
        .run(
            &["apply", "wf.toml", "--auto-approve", "--refresh=false"],
            &[],
        )
        .expect(1);
    assert!(
        forbidden.all().contains("User \"flow-e2e-admin\" cannot"),
        "{}",
        forbidden.all()
    );
    c.k.bind_eks_admins();
    c.apply(&[]).expect(0);
    assert_eq!(c.k.get(CONFIG_MAP).unwrap()["data"]["value"], "changed");
    c.run(&["destroy", "wf.toml", "--auto-approve"], &[])
        .expect(0);
    assert!(c.k.get(CONFIG_MAP).is_none());
}

/// A token signed with a secret key that is not the access key's is
/// refused (STS: SignatureDoesNotMatch); with the right one it is let in.
#[test]
fn a_token_signed_with_other_credentials_is_refused() {
    let c = Cloud::start(CLUSTER);
    let out = c.refused(
        &[("AWS_SECRET_ACCESS_KEY", "not-the-secret-of-testing")],
        "STS: SignatureDoesNotMatch",
    );
    eprintln!("{out}");
    c.apply(&[]).expect(0);
    assert!(c.k.get(CONFIG_MAP).is_some());
}

/// A token presented more than 15 minutes after it was signed is refused
/// (the webhook's clock is 16 minutes ahead); on time it is let in.
#[test]
fn an_expired_token_is_refused() {
    let c = Cloud::start(CLUSTER);
    c.k.eks_judge_later(Duration::from_secs(16 * 60));
    let out = c.refused(
        &[],
        "X-Amz-Date parameter is expired (15 minute expiration)",
    );
    eprintln!("{out}");
    c.k.eks_judge_later(Duration::ZERO);
    c.apply(&[]).expect(0);
    assert!(c.k.get(CONFIG_MAP).is_some());
}

/// The API server that DescribeCluster names for `dlc` is cluster `prod`
/// to its authenticator: flow's token, signed for `dlc`, is refused.
#[test]
fn a_token_for_another_cluster_is_refused() {
    let c = Cloud::start("prod");
    let out = c.refused(&[], "STS: SignatureDoesNotMatch");
    eprintln!("{out}");
}

/// A token with one bit flipped on its way is refused; unaltered it is
/// let in.
#[test]
fn an_altered_token_is_refused() {
    let c = Cloud::start(CLUSTER);
    c.k.eks_alter_tokens(true);
    let out = c.refused(&[], "STS: SignatureDoesNotMatch");
    eprintln!("{out}");
    c.k.eks_alter_tokens(false);
    c.apply(&[]).expect(0);
    assert!(c.k.get(CONFIG_MAP).is_some());
}
