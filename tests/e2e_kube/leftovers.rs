//! Destroy clears what controllers made: the test plays the AWS Load
//! Balancer Controller and the VPC CNI, making (outside flow, in the VPC
//! flow made for an eksctl file) a load balancer, a target group and a
//! security group tagged for the cluster, an interface the CNI left, plus
//! another cluster's load balancer and an untagged FSx interface. moto does
//! not refuse to delete a VPC that still holds them, so these tests check
//! flow's own scan: what it lists, what it deletes, and that it never
//! deletes what is not tagged for the cluster it destroys.

use std::time::{Duration, Instant};

use crate::support::fault_proxy::FaultProxy;
use crate::support::moto::{Moto, between_all};
use crate::support::{Project, Run, finish, signal, wait_until};
use crate::{ec2, first};

const CONFIG: &str = r#"apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: lb
  version: "1.33"
  region: us-east-1
availabilityZones: [us-east-1a, us-east-1b]
"#;

const WORKFLOW: &str = r#"
[workflow]
name = "wf"
region = "us-east-1"

[steps.cluster]
provider = "eks.cluster"
[steps.cluster.inputs]
eksctl_config = "cluster.yaml"
leftovers_wait = "1s"
"#;

/// moto behind the fault proxy, and a project with the cluster applied.
struct Lab {
    moto: Moto,
    proxy: FaultProxy,
    p: Project,
    env: Vec<(String, String)>,
}

/// What the test made in the VPC, as a controller would have.
struct Made {
    vpc: String,
    load_balancer: String,
    classic: String,
    target_group: String,
    group: String,
    node_group: String,
    cni_interface: String,
    other_load_balancer: String,
    fsx_interface: String,
}

impl Lab {
    fn applied() -> Lab {
        let moto = Moto::start();
        let proxy = FaultProxy::start(moto.addr);
        let env = moto.env_for(&proxy.endpoint());
        let p = Project::new();
        p.write("cluster.yaml", CONFIG);
        p.write("wf.toml", WORKFLOW);
        let lab = Lab {
            moto,
            proxy,
            p,
            env,
        };
        lab.run(&["apply", "wf.toml", "--auto-approve"]).expect(0);
        lab
    }

    fn run(&self, args: &[&str]) -> Run {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.p.run_env(args, &env)
    }

    fn elb(&self, params: &str) -> String {
        self.moto.query_call(
            "elasticloadbalancing",
            &format!("{params}&Version=2015-12-01"),
        )
    }

    /// Makes the objects controllers leave behind.
    fn make_leftovers(&self) -> Made {
        let out = self
            .run(&["output", "wf.toml", "cluster", "--json"])
            .expect(0);
        let out: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let vpc = out["vpc_id"].as_str().expect("vpc_id").to_string();
        let public: Vec<&str> = out["public_subnet_ids"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s.as_str())
            .collect();
        let node_group = out["shared_node_security_group_id"]
            .as_str()
            .expect("shared node group")
            .to_string();
        let lbc_tag = "Tags.member.1.Key=elbv2.k8s.aws%2Fcluster&Tags.member.1.Value=lb";
        let load_balancer = first(
            &self.elb(&format!(
                "Action=CreateLoadBalancer&Name=k8s-default-web&Type=network&Subnets.member.1={}&Subnets.member.2={}&{lbc_tag}",
                public[0], public[1]
            )),
            "LoadBalancerArn",
        );
        // The in-tree service controller's Classic Load Balancer (no Load
        // Balancer Controller installed), named as it names them.
        let classic = "a1b2c3d4e5f60718293a4b5c6d7e8f90".to_string();
        self.classic_elb(&format!(
            "Action=CreateLoadBalancer&LoadBalancerName={classic}\
             &Listeners.member.1.Protocol=TCP&Listeners.member.1.LoadBalancerPort=80&Listeners.member.1.InstancePort=30080\
             &Subnets.member.1={}&Tags.member.1.Key=kubernetes.io%2Fcluster%2Flb&Tags.member.1.Value=owned",
            public[0]
        ));
        let target_group = first(
            &self.elb(&format!(
                "Action=CreateTargetGroup&Name=k8s-default-web-tg&Protocol=TCP&Port=80&TargetType=ip&VpcId={vpc}&{lbc_tag}"
            )),
            "TargetGroupArn",
        );
        let group = first(
            &ec2(
                &self.moto,
                &format!(
                    "Action=CreateSecurityGroup&GroupName=k8s-traffic-lb&GroupDescription=lbc&VpcId={vpc}\
                     &TagSpecification.1.ResourceType=security-group\
                     &TagSpecification.1.Tag.1.Key=elbv2.k8s.aws%2Fcluster&TagSpecification.1.Tag.1.Value=lb"
                ),
            ),
            "groupId",
        );
        // The controller lets its group reach the nodes.
        ec2(
            &self.moto,
            &format!(
                "Action=AuthorizeSecurityGroupIngress&GroupId={node_group}&IpPermissions.1.IpProtocol=tcp\
                 &IpPermissions.1.FromPort=0&IpPermissions.1.ToPort=65535&IpPermissions.1.Groups.1.GroupId={group}"
            ),
        );
        let cni_interface = first(
            &ec2(
                &self.moto,
                &format!(
                    "Action=CreateNetworkInterface&SubnetId={}&Description=aws-K8S-i-0123456789abcdef0\
                     &TagSpecification.1.ResourceType=network-interface\
                     &TagSpecification.1.Tag.1.Key=cluster.k8s.amazonaws.com%2Fname&TagSpecification.1.Tag.1.Value=lb",
                    public[0]
                ),
            ),
            "networkInterfaceId",
        );
        let other_load_balancer = first(
            &self.elb(&format!(
                "Action=CreateLoadBalancer&Name=other-web&Type=network&Subnets.member.1={}\
                 &Tags.member.1.Key=kubernetes.io%2Fcluster%2Fother&Tags.member.1.Value=owned",
                public[1]
            )),
            "LoadBalancerArn",
        );
        let fsx_interface = first(
            &ec2(
                &self.moto,
                &format!(
                    "Action=CreateNetworkInterface&SubnetId={}&Description=ENI%20for%20Amazon%20FSx%20fs-0123",
                    public[1]
                ),
            ),
            "networkInterfaceId",
        );
        Made {
            vpc,
            load_balancer,
            classic,
            target_group,
            group,
            node_group,
            cni_interface,
            other_load_balancer,
            fsx_interface,
        }
    }

    /// Deletes, as the user would with the listed commands, the two objects
    /// no cluster step of the workflow deletes.
    fn remove_what_no_cluster_step_owns(&self, made: &Made) {
        self.elb(&format!(
            "Action=DeleteLoadBalancer&LoadBalancerArn={}",
            made.other_load_balancer
        ));
        ec2(
            &self.moto,
            &format!(
                "Action=DeleteNetworkInterface&NetworkInterfaceId={}",
                made.fsx_interface
            ),
        );
    }

    /// A call to ELB (Classic Load Balancers).
    fn classic_elb(&self, params: &str) -> String {
        self.moto.query_call(
            "elasticloadbalancing",
            &format!("{params}&Version=2012-06-01"),
        )
    }

    fn classic_load_balancers(&self) -> Vec<String> {
        between_all(
            &self.classic_elb("Action=DescribeLoadBalancers"),
            "<LoadBalancerName>",
            "</LoadBalancerName>",
        )
    }

    fn load_balancers(&self) -> Vec<String> {
        between_all(
            &self.elb("Action=DescribeLoadBalancers"),
            "<LoadBalancerArn>",
            "</LoadBalancerArn>",
        )
    }

    fn target_groups(&self) -> Vec<String> {
        between_all(
            &self.elb("Action=DescribeTargetGroups"),
            "<TargetGroupArn>",
            "</TargetGroupArn>",
        )
    }

    fn interfaces(&self, vpc: &str) -> Vec<String> {
        between_all(
            &ec2(
                &self.moto,
                &format!(
                    "Action=DescribeNetworkInterfaces&Filter.1.Name=vpc-id&Filter.1.Value.1={vpc}"
                ),
            ),
            "<networkInterfaceId>",
            "</networkInterfaceId>",
        )
    }

    fn groups(&self, vpc: &str) -> String {
        ec2(
            &self.moto,
            &format!("Action=DescribeSecurityGroups&Filter.1.Name=vpc-id&Filter.1.Value.1={vpc}"),
        )
    }

    fn vpc_stack_exists(&self) -> bool {
        self.moto.stacks().iter().any(|s| s == "flow-eks-lb-vpc")
    }
}

#[test]
fn destroy_lists_what_controllers_left_and_cleans_only_the_clusters_own() {
    let lab = Lab::applied();
    let made = lab.make_leftovers();

    // Without the flag: the cluster's five are listed, each with its tie and
    // command; nothing is deleted, the VPC and the step's record stay.
    let refused = lab.run(&["destroy", "wf.toml", "--auto-approve"]).expect(1);
    let text = refused.all();
    for (id, line) in [
        (
            &made.load_balancer,
            format!(
                "load balancer `k8s-default-web` {} (tagged elbv2.k8s.aws/cluster=lb): aws elbv2 delete-load-balancer --load-balancer-arn {}",
                made.load_balancer, made.load_balancer
            ),
        ),
        (
            &made.classic,
            format!(
                "classic load balancer {} (tagged kubernetes.io/cluster/lb=owned): aws elb delete-load-balancer --load-balancer-name {}",
                made.classic, made.classic
            ),
        ),
        (
            &made.target_group,
            format!(
                "target group `k8s-default-web-tg` {} (tagged elbv2.k8s.aws/cluster=lb): aws elbv2 delete-target-group --target-group-arn {}",
                made.target_group, made.target_group
            ),
        ),
        (
            &made.group,
            format!(
                "security group `k8s-traffic-lb` {} (tagged elbv2.k8s.aws/cluster=lb): aws ec2 delete-security-group --group-id {}",
                made.group, made.group
            ),
        ),
        (
            &made.cni_interface,
            format!(
                "network interface `aws-K8S-i-0123456789abcdef0` {} (tagged cluster.k8s.amazonaws.com/name=lb): aws ec2 delete-network-interface --network-interface-id {}",
                made.cni_interface, made.cni_interface
            ),
        ),
    ] {
        assert!(text.contains(&line), "{id}: `{line}` missing from\n{text}");
    }
    assert!(
        text.contains("5 object(s) that controllers made are still in"),
        "{text}"
    );
    assert!(
        text.contains("`flow destroy --clean-leftovers` deletes those tagged for cluster `lb`"),
        "{text}"
    );
    // Another cluster's objects are not this cluster step's business.
    assert!(!text.contains(&made.other_load_balancer), "{text}");
    assert!(lab.vpc_stack_exists());
    assert_eq!(lab.load_balancers().len(), 2);
    assert_eq!(
        lab.classic_load_balancers(),
        std::slice::from_ref(&made.classic)
    );
    let listed = lab.run(&["state", "list", "wf.toml"]).expect(0);
    assert!(listed.stdout.contains("cluster"), "{}", listed.all());

    // With the flag: the cluster's own go (the node group's rule naming the
    // controller's group first); the VPC's sweep then lists what belongs to
    // no cluster it destroys, and deletes none of it.
    let cleaned = lab
        .run(&["destroy", "wf.toml", "--auto-approve", "--clean-leftovers"])
        .expect(1);
    let text = cleaned.all();
    assert_eq!(
        lab.load_balancers(),
        std::slice::from_ref(&made.other_load_balancer)
    );
    assert!(
        lab.classic_load_balancers().is_empty(),
        "{:?}",
        lab.classic_load_balancers()
    );
    assert!(lab.target_groups().is_empty(), "{:?}", lab.target_groups());
    let interfaces = lab.interfaces(&made.vpc);
    assert!(!interfaces.contains(&made.cni_interface), "{interfaces:?}");
    assert!(interfaces.contains(&made.fsx_interface), "{interfaces:?}");
    let groups = lab.groups(&made.vpc);
    assert!(!groups.contains(&made.group), "{groups}");
    assert!(groups.contains(&made.node_group), "{groups}");
    for (what, reason) in [
        (
            &made.other_load_balancer,
            "tagged for cluster `other`: its cluster step's destroy deletes it with --clean-leftovers",
        ),
        (&made.fsx_interface, "left by FSx, tagged for no cluster"),
    ] {
        assert!(
            text.contains(what.as_str()) && text.contains(reason),
            "{what}: {reason} missing from\n{text}"
        );
    }
    assert!(
        text.contains("2 object(s) that controllers made are still in"),
        "{text}"
    );
    assert!(lab.vpc_stack_exists());

    // The user removes those two with the commands given; the destroy ends.
    lab.remove_what_no_cluster_step_owns(&made);
    let done = lab.run(&["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(done.stdout.contains("1 deleted"), "{}", done.all());
    assert!(!lab.vpc_stack_exists(), "{:?}", lab.moto.stacks());
}

/// kill -9 while a delete the clean sent is in flight (moto has acted, the
/// answer is held back), once in each kind of delete; each run after a kill
/// resumes, and the last one leaves neither the leftovers nor the VPC.
#[test]
fn kill_9_inside_each_clean_call_resumes_to_an_empty_vpc() {
    let lab = Lab::applied();
    let made = lab.make_leftovers();
    // Only the cluster's own: the VPC's sweep would refuse the others.
    lab.remove_what_no_cluster_step_owns(&made);
    let calls = [
        "DeleteLoadBalancer",
        "DeleteTargetGroup",
        "DeleteNetworkInterface",
        "RevokeSecurityGroupIngress",
        "DeleteSecurityGroup",
    ];
    for op in calls {
        lab.proxy.hold(op, Duration::from_secs(3));
    }
    let args = ["destroy", "wf.toml", "--auto-approve", "--clean-leftovers"];
    for op in calls {
        let from = lab.proxy.calls().len();
        let mut cmd = lab.p.cmd(&args);
        for (k, v) in &lab.env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn flow");
        wait_until(
            Duration::from_secs(60),
            &format!("flow to send {op}"),
            || lab.proxy.calls()[from..].iter().any(|c| c.op == op),
        );
        let at = Instant::now();
        signal(&child, libc::SIGKILL);
        finish(child);
        // The calls of this run received before the kill and not answered
        // by then.
        let in_flight: Vec<String> = lab.proxy.calls()[from..]
            .iter()
            .filter(|c| c.received <= at && c.answered.is_none_or(|a| a > at))
            .map(|c| c.op.clone())
            .filter(|op| calls.contains(&op.as_str()))
            .collect();
        assert_eq!(in_flight, [op], "the kill did not land in {op}");
        // moto acted on the call; flow never heard the answer.
        wait_until(
            Duration::from_secs(10),
            &format!("moto to act on {op}"),
            || {
                let groups = lab.groups(&made.vpc);
                match op {
                    "DeleteLoadBalancer" => !lab.load_balancers().contains(&made.load_balancer),
                    "DeleteTargetGroup" => lab.target_groups().is_empty(),
                    "DeleteNetworkInterface" => {
                        !lab.interfaces(&made.vpc).contains(&made.cni_interface)
                    }
                    "RevokeSecurityGroupIngress" => !ec2(
                        &lab.moto,
                        &format!(
                            "Action=DescribeSecurityGroups&GroupId.1={}",
                            made.node_group
                        ),
                    )
                    .contains(&made.group),
                    _ => !groups.contains(&made.group),
                }
            },
        );
    }
    lab.proxy.calm();
    let done = lab.run(&args).expect(0);
    assert!(done.stdout.contains("1 deleted"), "{}", done.all());
    assert!(
        lab.load_balancers().is_empty(),
        "{:?}",
        lab.load_balancers()
    );
    assert!(lab.target_groups().is_empty(), "{:?}", lab.target_groups());
    assert!(
        lab.classic_load_balancers().is_empty(),
        "{:?}",
        lab.classic_load_balancers()
    );
    assert!(!lab.vpc_stack_exists(), "{:?}", lab.moto.stacks());
}
