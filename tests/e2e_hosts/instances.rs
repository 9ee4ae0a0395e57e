//! Instances made through the local cloud are hosts: a CloudFormation
//! stack's `AWS::EC2::Instance` applied by `flow`, and RunInstances.

use super::hosts::{Hosts, import_key_pair, keygen};
use super::support::moto::Moto;
use super::support::{Project, Run};

const TEMPLATE: &str = r#"AWSTemplateFormatVersion: "2010-09-09"
Parameters:
  KeyName:
    Type: String
Resources:
  Vpc:
    Type: AWS::EC2::VPC
    Properties:
      CidrBlock: 10.20.0.0/16
  Subnet:
    Type: AWS::EC2::Subnet
    Properties:
      VpcId: !Ref Vpc
      CidrBlock: 10.20.1.0/24
      AvailabilityZone: us-east-1a
  Node:
    Type: AWS::EC2::Instance
    Properties:
      ImageId: ami-760aaa0f
      InstanceType: t3.micro
      KeyName: !Ref KeyName
      SubnetId: !Ref Subnet
Outputs:
  InstanceId:
    Value: !Ref Node
  PrivateIp:
    Value: !GetAtt Node.PrivateIp
  PrivateDnsName:
    Value: !GetAtt Node.PrivateDnsName
"#;

const WORKFLOW: &str = r#"[workflow]
name = "one-host"

[steps.node]
provider = "cloudformation.stack"
[steps.node.inputs]
stack_name = "one-host"
template = "node.yaml"
parameters = { KeyName = "flow-key" }
"#;

fn flow(p: &Project, moto: &Moto, args: &[&str]) -> Run {
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    p.run_env(args, &env)
}

#[test]
fn a_stacks_instance_is_a_host_reached_over_ssh_and_destroy_ends_it() {
    let hosts = Hosts::start();
    let _inside = hosts.enter();
    let moto = Moto::start_with(&[("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy())]);
    let p = Project::new();
    p.write("node.yaml", TEMPLATE);
    p.write("wf.toml", WORKFLOW);
    let key = keygen(p.path(), "flow-key");
    import_key_pair(&moto, "flow-key", &key);

    flow(&p, &moto, &["apply", "wf.toml", "--auto-approve"]).expect(0);
    let output = |k: &str| {
        flow(&p, &moto, &["output", "wf.toml", &format!("node.{k}")])
            .expect(0)
            .stdout
            .trim()
            .to_string()
    };
    let (ip, dns, id) = (
        output("PrivateIp"),
        output("PrivateDnsName"),
        output("InstanceId"),
    );
    assert!(ip.starts_with("10.20.1."), "{ip}");
    assert_eq!(dns, format!("ip-{}.ec2.internal", ip.replace('.', "-")));
    let host = hosts
        .at(&ip)
        .unwrap_or_else(|| panic!("no host at {ip}: {:?}", hosts.list()));
    assert_eq!(host["id"], id.as_str());
    // Amazon Linux's default user, as AWS's table gives it.
    assert_eq!(host["user"], "ec2-user");

    let out = hosts.ssh(
        &host,
        &key,
        "hostname; whoami; ip -o -4 addr show eth0; readlink /proc/1/ns/net",
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ssh ec2-user@{ip}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], dns, "{stdout}");
    assert_eq!(lines[1], "ec2-user", "{stdout}");
    assert!(lines[2].contains(&format!("inet {ip}/8")), "{stdout}");
    let here = std::fs::read_link("/proc/thread-self/ns/net").expect("netns");
    assert_ne!(
        lines[3],
        here.to_string_lossy(),
        "the host is a netns of its own: {stdout}"
    );

    flow(&p, &moto, &["plan", "wf.toml"]).expect(0);
    flow(&p, &moto, &["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(
        hosts.at(&ip).is_none(),
        "destroy left a host at {ip}: {:?}",
        hosts.list()
    );
    let pid = host["pid"].as_u64().expect("pid");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the host's PID 1 ({pid}) outlived its instance"
    );
    let gone = hosts.ssh(&host, &key, "true");
    assert_eq!(gone.status.code(), Some(255), "{gone:?}");
}

#[test]
fn run_instances_makes_hosts_terminate_ends_them_and_a_taken_address_is_refused() {
    let hosts = Hosts::start();
    let _inside = hosts.enter();
    let moto = Moto::start_with(&[("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy())]);
    let p = Project::new();
    let key = keygen(p.path(), "k");
    import_key_pair(&moto, "k", &key);
    let vpc = moto.query_call(
        "ec2",
        "Action=CreateVpc&Version=2016-11-15&CidrBlock=10.30.0.0/16",
    );
    let vpc = super::support::moto::between_all(&vpc, "<vpcId>", "</vpcId>")[0].clone();
    let subnet = moto.query_call(
        "ec2",
        &format!("Action=CreateSubnet&Version=2016-11-15&VpcId={vpc}&CidrBlock=10.30.1.0/24"),
    );
    let subnet = super::support::moto::between_all(&subnet, "<subnetId>", "</subnetId>")[0].clone();
    // An Ubuntu AMI: its default user is `ubuntu`.
    let run = moto.query_call(
        "ec2",
        &format!(
            "Action=RunInstances&Version=2016-11-15&ImageId=ami-1e749f67&MinCount=2&MaxCount=2\
             &KeyName=k&SubnetId={subnet}&InstanceType=t3.micro"
        ),
    );
    let ids = super::support::moto::between_all(&run, "<instanceId>", "</instanceId>");
    // Each instance names its address three times (itself, its interface,
    // the interface's address set): once each, in order.
    let mut ips =
        super::support::moto::between_all(&run, "<privateIpAddress>", "</privateIpAddress>");
    ips.dedup();
    assert_eq!(ids.len(), 2, "{run}");
    assert_eq!(ips.len(), 2, "{run}");
    for ip in &ips {
        let host = hosts.at(ip).unwrap_or_else(|| panic!("no host at {ip}"));
        assert_eq!(host["user"], "ubuntu");
        let out = hosts.ssh(&host, &key, "hostname");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("ip-{}.ec2.internal", ip.replace('.', "-")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    moto.query_call(
        "ec2",
        &format!(
            "Action=TerminateInstances&Version=2016-11-15&InstanceId.1={}",
            ids[0]
        ),
    );
    let left: Vec<String> = hosts.list().iter().map(|h| h["id"].to_string()).collect();
    assert_eq!(
        left,
        [format!("\"{}\"", ids[1])],
        "after terminating {}",
        ids[0]
    );

    // The same address in another VPC cannot be a second host on the bridge.
    let other = moto.query_call(
        "ec2",
        "Action=CreateVpc&Version=2016-11-15&CidrBlock=10.30.0.0/16",
    );
    let other = super::support::moto::between_all(&other, "<vpcId>", "</vpcId>")[0].clone();
    let subnet2 = moto.query_call(
        "ec2",
        &format!("Action=CreateSubnet&Version=2016-11-15&VpcId={other}&CidrBlock=10.30.1.0/24"),
    );
    let subnet2 =
        super::support::moto::between_all(&subnet2, "<subnetId>", "</subnetId>")[0].clone();
    let (status, body) = moto.http(
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", &super::support::moto::authorization("ec2")),
        ],
        format!(
            "Action=RunInstances&Version=2016-11-15&ImageId=ami-1e749f67&MinCount=1&MaxCount=1\
             &SubnetId={subnet2}&PrivateIpAddress={}",
            ips[1]
        )
        .as_bytes(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("InsufficientInstanceCapacity"), "{body}");
    assert!(
        body.contains(&format!("address {} is already a host's", ips[1])),
        "{body}"
    );
    assert_eq!(hosts.list().len(), 1, "the refused launch left a host");
}

/// Each host's root volume is its own (scripts/local-cloud/hosts/manager.py):
/// what one host writes under /etc and /var/lib another does not see, nor
/// does this machine; StopInstances and StartInstances keep it, as an EBS
/// root volume is kept; TerminateInstances deletes it.
#[test]
fn a_hosts_root_volume_is_its_own_kept_over_stop_and_start_and_deleted_on_terminate() {
    let hosts = Hosts::start();
    let _inside = hosts.enter();
    let moto = Moto::start_with(&[("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy())]);
    let p = Project::new();
    let key = keygen(p.path(), "k");
    import_key_pair(&moto, "k", &key);
    let ec2 = |params: &str| moto.query_call("ec2", &format!("Version=2016-11-15&{params}"));
    let run = ec2("Action=RunInstances&ImageId=ami-760aaa0f&MinCount=2&MaxCount=2&KeyName=k");
    let ids = super::support::moto::between_all(&run, "<instanceId>", "</instanceId>");
    assert_eq!(ids.len(), 2, "{run}");
    let host_of = |id: &str| {
        hosts
            .list()
            .into_iter()
            .find(|h| h["id"] == id)
            .unwrap_or_else(|| panic!("no host for {id}: {:?}", hosts.list()))
    };
    let (first, second) = (host_of(&ids[0]), host_of(&ids[1]));
    let mark = "/etc/flow-volume-mark";
    let sh = |host: &serde_json::Value, command: &str| {
        let out = hosts.ssh(host, &key, command);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let wrote = sh(
        &first,
        &format!("echo one > {mark} && mkdir -p /var/lib/flow-mark && cat {mark}"),
    );
    assert_eq!(wrote, "one\n");
    assert!(
        sh(&second, &format!("cat {mark}")).contains("No such file"),
        "another host sees the first one's /etc"
    );
    assert!(
        !std::path::Path::new(mark).exists(),
        "{mark} reached this machine"
    );
    assert!(!std::path::Path::new("/var/lib/flow-mark").exists());

    // Stopped and started: a new host at the same address, the same volume.
    let volume = first["volume"].as_str().expect("volume").to_string();
    ec2(&format!("Action=StopInstances&InstanceId.1={}", ids[0]));
    assert!(hosts.list().iter().all(|h| h["id"] != ids[0].as_str()));
    assert!(
        std::path::Path::new(&volume).is_dir(),
        "a stop lost the volume"
    );
    ec2(&format!("Action=StartInstances&InstanceId.1={}", ids[0]));
    let again = host_of(&ids[0]);
    assert_ne!(again["pid"], first["pid"], "not a new host");
    assert_eq!(again["ip"], first["ip"]);
    assert_eq!(
        sh(&again, &format!("cat {mark}; ls -d /var/lib/flow-mark")),
        "one\n/var/lib/flow-mark\n"
    );

    ec2(&format!(
        "Action=TerminateInstances&InstanceId.1={}",
        ids[0]
    ));
    assert!(
        !std::path::Path::new(&volume).exists(),
        "a terminated instance's volume is left"
    );
}
