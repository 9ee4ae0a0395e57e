//! Custom AMIs as steps (issue 39, part 4): `ec2.image` launches a builder
//! (a host of the local cloud), runs a playbook on it with Debian's real
//! `ansible-playbook` over SSH, makes the image, terminates the builder.
//! Re-apply is unchanged, an edited playbook replaces the image (and the
//! step that uses its id follows), destroy deregisters it and deletes its
//! snapshots. A failing playbook and a builder that refuses the key fail
//! with what happened, leaving no image, no builder and nothing applied.

use super::hosts::{Hosts, Inside, ensure_installed, keygen};
use super::support::moto::{Moto, between_all};
use super::support::{Project, Run};

const WORKFLOW: &str = r#"[workflow]
name = "image"

[steps.base]
provider = "ec2.image"
[steps.base.inputs]
name = "flow-base"
# Amazon Linux in moto's catalogue: its login user is ec2-user.
source_ami = "ami-760aaa0f"
instance_type = "t3.micro"
playbooks = ["ansible/base.yml"]
ssh_interface = "private_ip"
ssh_timeout = 60
tags = { team = "ml" }

# What a cluster step would take as its CustomAmi.
[steps.cluster]
provider = "null"
[steps.cluster.inputs]
custom_ami = "${steps.base.outputs.image_id}"
"#;

/// Writes a file on the builder (nothing from the network) and says which
/// host it ran on.
const PLAYBOOK: &str = r#"- hosts: all
  gather_facts: false
  tasks:
    - name: write the marker
      copy:
        dest: /run/flow-image-marker
        content: "MARKER-ONE\n"
    - name: where it ran
      command: hostname
      register: where
    - name: say it
      debug:
        msg: "marker written on {{ where.stdout }}"
"#;

/// What an image build needs: Debian's `ansible-playbook`, local hosts, and
/// a moto inside their sealed namespace whose instances are hosts. Drops
/// moto, then leaves the namespace, then ends the hosts.
pub(super) struct BuildCloud {
    pub moto: Moto,
    _inside: Inside,
    pub hosts: Hosts,
}

impl BuildCloud {
    /// The snapshots whose layers the local cloud keeps, sorted.
    pub fn captured(&self) -> Vec<String> {
        captured(&self.hosts)
    }

    /// Installs `ansible` when missing, starts the hosts and moto.
    pub fn start() -> BuildCloud {
        ensure_installed("ansible-playbook", "ansible");
        let hosts = Hosts::start();
        let inside = hosts.enter();
        let moto = Moto::start_with(&[("FLOW_LOCAL_HOSTS", &hosts.socket.to_string_lossy())]);
        BuildCloud {
            moto,
            _inside: inside,
            hosts,
        }
    }
}

/// The snapshots whose layers the local cloud keeps (in the host
/// manager's work folder, `snapshots/ID`), sorted.
pub(super) fn captured(hosts: &Hosts) -> Vec<String> {
    let work = hosts.socket.parent().expect("the manager's work folder");
    let mut found: Vec<String> = std::fs::read_dir(work.join("snapshots"))
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// `flow ARGS` in `p` against `moto`.
pub(super) fn flow(p: &Project, moto: &Moto, args: &[&str]) -> Run {
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    p.run_env(args, &env)
}

/// One EC2 query call; its XML.
pub(super) fn ec2(moto: &Moto, params: &str) -> String {
    moto.query_call("ec2", &format!("Version=2016-11-15&{params}"))
}

/// The images this account owns.
pub(super) fn own_images(moto: &Moto) -> Vec<String> {
    between_all(
        &ec2(moto, "Action=DescribeImages&Owner.1=self"),
        "<imageId>",
        "</imageId>",
    )
}

/// All snapshot ids moto holds.
pub(super) fn snapshots(moto: &Moto) -> Vec<String> {
    between_all(
        &ec2(moto, "Action=DescribeSnapshots&Owner.1=self"),
        "<snapshotId>",
        "</snapshotId>",
    )
}

/// The builders flow launched (by their tag) and their states.
fn builders(moto: &Moto) -> Vec<String> {
    let xml = ec2(
        moto,
        "Action=DescribeInstances&Filter.1.Name=tag-key&Filter.1.Value.1=flow:image-builder",
    );
    between_all(&xml, "<instanceState>", "</instanceState>")
        .iter()
        .flat_map(|s| between_all(s, "<name>", "</name>"))
        .collect()
}

fn key_pairs(moto: &Moto) -> Vec<String> {
    between_all(
        &ec2(moto, "Action=DescribeKeyPairs"),
        "<keyName>",
        "</keyName>",
    )
}

/// The image's snapshot ids, as DescribeImages gives them.
pub(super) fn snapshots_of(moto: &Moto, image: &str) -> Vec<String> {
    between_all(
        &ec2(moto, &format!("Action=DescribeImages&ImageId.1={image}")),
        "<snapshotId>",
        "</snapshotId>",
    )
}

/// `flow output wf.toml KEY`, trimmed.
pub(super) fn output(p: &Project, moto: &Moto, key: &str) -> String {
    flow(p, moto, &["output", "wf.toml", key])
        .expect(0)
        .stdout
        .trim()
        .to_string()
}

#[test]
fn a_playbook_on_a_builder_host_makes_a_tagged_image_replaced_on_edit_and_deregistered_on_destroy()
{
    let cloud = BuildCloud::start();
    let (hosts, moto) = (&cloud.hosts, &cloud.moto);
    let p = Project::new();
    p.write("wf.toml", WORKFLOW);
    p.write("ansible/base.yml", PLAYBOOK);

    let run = flow(&p, moto, &["apply", "wf.toml", "--auto-approve"]).expect(0);
    let image = output(&p, moto, "base.image_id");
    assert!(image.starts_with("ami-"), "{image}\n{}", run.all());
    assert_eq!(own_images(moto), std::slice::from_ref(&image));
    let described = ec2(moto, &format!("Action=DescribeImages&ImageId.1={image}"));
    assert!(described.contains("<name>flow-base</name>"), "{described}");
    assert!(described.contains("<key>flow:token</key>"), "{described}");
    assert!(described.contains("<key>team</key>"), "{described}");
    assert!(
        described.contains("<imageState>available</imageState>"),
        "{described}"
    );
    let first_snapshots = snapshots_of(moto, &image);
    assert_eq!(first_snapshots.len(), 1, "{described}");
    // The builder's root volume, captured under the image's snapshot
    // (scripts/local-cloud/cloud_hosts_images.py).
    assert_eq!(cloud.captured(), first_snapshots, "the layers kept");
    // The playbook ran on the builder host (its hostname is the builder's
    // private DNS name), and the builder is gone: terminated, no host.
    let logs = flow(&p, moto, &["logs", "wf.toml", "base"]).expect(0);
    assert!(
        logs.stdout.contains("TASK [write the marker]"),
        "{}",
        logs.all()
    );
    assert!(
        logs.stdout.contains("marker written on ip-") && logs.stdout.contains(".ec2.internal"),
        "{}",
        logs.all()
    );
    assert_eq!(builders(moto), ["terminated"]);
    assert!(
        hosts.list().is_empty(),
        "a builder host is left: {:?}",
        hosts.list()
    );
    assert!(
        key_pairs(moto).is_empty(),
        "the build's key pair is left: {:?}",
        key_pairs(moto)
    );
    assert_eq!(output(&p, moto, "cluster.custom_ami"), image);

    // Unchanged: nothing is built again.
    let again = flow(&p, moto, &["apply", "wf.toml", "--auto-approve"]).expect(0);
    assert_eq!(
        own_images(moto),
        std::slice::from_ref(&image),
        "{}",
        again.all()
    );
    assert_eq!(builders(moto), ["terminated"], "{}", again.all());

    // An edited playbook replaces the image, and its user follows.
    p.write(
        "ansible/base.yml",
        &PLAYBOOK.replace("MARKER-ONE", "MARKER-TWO"),
    );
    let plan = flow(&p, moto, &["plan", "wf.toml"]).expect(0);
    assert!(
        plan.stdout.contains("base") && plan.stdout.contains(" 1 to replace"),
        "{}",
        plan.all()
    );
    flow(&p, moto, &["apply", "wf.toml", "--auto-approve"]).expect(0);
    let second = output(&p, moto, "base.image_id");
    assert_ne!(second, image);
    assert_eq!(own_images(moto), std::slice::from_ref(&second));
    for s in &first_snapshots {
        assert!(
            !snapshots(moto).contains(s),
            "the replaced image's snapshot {s} is left"
        );
    }
    assert_eq!(output(&p, moto, "cluster.custom_ami"), second);
    assert!(hosts.list().is_empty(), "{:?}", hosts.list());

    let second_snapshots = snapshots_of(moto, &second);
    flow(&p, moto, &["destroy", "wf.toml", "--auto-approve"]).expect(0);
    assert!(own_images(moto).is_empty(), "{:?}", own_images(moto));
    assert!(
        cloud.captured().is_empty(),
        "DeleteSnapshot left the layers of {:?}",
        cloud.captured()
    );
    for s in &second_snapshots {
        assert!(!snapshots(moto).contains(s), "destroy left snapshot {s}");
    }
}

#[test]
fn a_failing_playbook_and_a_refused_key_leave_no_image_no_builder_and_nothing_applied() {
    let cloud = BuildCloud::start();
    let (hosts, moto) = (&cloud.hosts, &cloud.moto);

    // A task that fails: its name and output come back; the builder goes.
    let p = Project::new();
    p.write("wf.toml", &WORKFLOW.replace("ssh_timeout = 60\n", ""));
    p.write(
        "ansible/base.yml",
        r#"- hosts: all
  gather_facts: false
  tasks:
    - name: write the marker
      copy:
        dest: /run/flow-image-marker
        content: "x\n"
    - name: install the driver
      shell: "echo no driver for this card; exit 3"
    - name: never reached
      command: "true"
"#,
    );
    let failed = flow(&p, moto, &["apply", "wf.toml", "--auto-approve"]);
    assert_ne!(failed.code, 0, "{}", failed.all());
    let all = failed.all();
    assert!(all.contains("failed at task `install the driver`"), "{all}");
    assert!(all.contains("no driver for this card"), "{all}");
    assert!(!all.contains("never reached"), "{all}");
    assert!(own_images(moto).is_empty(), "{:?}", own_images(moto));
    assert_eq!(builders(moto), ["terminated"]);
    assert!(hosts.list().is_empty(), "{:?}", hosts.list());
    assert!(key_pairs(moto).is_empty(), "{:?}", key_pairs(moto));
    let out = flow(&p, moto, &["output", "wf.toml", "base.image_id"]);
    assert_ne!(out.code, 0, "an image id was recorded: {}", out.all());

    // A builder that refuses the key: one error naming the address, the
    // user and the key (never its content); nothing recorded.
    let q = Project::new();
    let allowed = keygen(q.path(), "allowed");
    let other = keygen(q.path(), "other");
    let public = std::fs::read_to_string(allowed.with_extension("pub")).expect("public key");
    let material = base64_url(public.trim());
    ec2(
        moto,
        &format!("Action=ImportKeyPair&KeyName=builders&PublicKeyMaterial={material}"),
    );
    q.write(
        "wf.toml",
        &WORKFLOW
            .replace(
                "ssh_timeout = 60\n",
                "ssh_timeout = 20\nkey_name = \"builders\"\nssh_private_key = \"${vars.key}\"\n",
            )
            .replace(
                "[steps.base]",
                "[vars.key]\nsensitive = true\nenv = \"BUILDER_KEY\"\n\n[steps.base]",
            ),
    );
    q.write("ansible/base.yml", PLAYBOOK);
    let wrong = std::fs::read_to_string(&other).expect("the other key");
    let env = moto.env();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("BUILDER_KEY", wrong.as_str()));
    let refused = q.run_env(&["apply", "wf.toml", "--auto-approve"], &env);
    assert_ne!(refused.code, 0, "{}", refused.all());
    let all = refused.all();
    let ips = between_all(
        &ec2(
            moto,
            "Action=DescribeInstances&Filter.1.Name=tag-key&Filter.1.Value.1=flow:image-builder",
        ),
        "<privateIpAddress>",
        "</privateIpAddress>",
    );
    assert!(
        ips.iter()
            .any(|ip| all.contains(&format!("at ec2-user@{ip} "))),
        "{ips:?}: {all}"
    );
    assert!(all.contains("key pair `builders`"), "{all}");
    assert!(all.contains("SHA256:"), "{all}");
    assert!(all.contains("Permission denied"), "{all}");
    let secret: Vec<&str> = wrong.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!secret.is_empty());
    for line in secret {
        assert!(!all.contains(line), "the private key reached the output");
    }
    assert!(own_images(moto).is_empty(), "{:?}", own_images(moto));
    assert!(hosts.list().is_empty(), "{:?}", hosts.list());
    assert_eq!(key_pairs(moto), ["builders"]);
    let out = q.run_env(&["output", "wf.toml", "base.image_id"], &env);
    assert_ne!(out.code, 0, "an image id was recorded: {}", out.all());
}

/// `text` base64-encoded and then form-encoded, as `aws ec2
/// import-key-pair` sends a public key.
fn base64_url(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .encode(text)
        .bytes()
        .map(|b| match b {
            b'+' => "%2B".to_string(),
            b'/' => "%2F".to_string(),
            b'=' => "%3D".to_string(),
            b => (b as char).to_string(),
        })
        .collect()
}

/// Packer is not in Debian: where `packer` is not on PATH, a step with a
/// `packer_template` is refused at validate and at apply, naming it, and
/// nothing is applied.
#[test]
fn a_packer_template_without_packer_installed_is_refused_naming_it() {
    let p = Project::new();
    p.write(
        "wf.toml",
        r#"[workflow]
name = "packer"

[steps.base]
provider = "ec2.image"
[steps.base.inputs]
name = "flow-base"
packer_template = "packer/base.pkr.hcl"
"#,
    );
    p.write(
        "packer/base.pkr.hcl",
        "source \"amazon-ebs\" \"base\" {}\nbuild { sources = [\"source.amazon-ebs.base\"] }\n",
    );
    // A PATH with no `packer` on it, whatever this machine has installed.
    let empty = p.path().join("empty-bin");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let path = empty.to_string_lossy().into_owned();
    let env = [
        ("PATH", path.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ];
    for args in [
        &["validate", "wf.toml"][..],
        &["apply", "wf.toml", "--auto-approve"][..],
    ] {
        let run = p.run_env(args, &env);
        assert_ne!(run.code, 0, "{args:?}: {}", run.all());
        let all = run.all();
        assert!(
            all.contains("the `packer` CLI is not installed (no `packer` on PATH)"),
            "{args:?}: {all}"
        );
        assert!(all.contains("packer_template"), "{args:?}: {all}");
    }
    let out = p.run_env(&["output", "wf.toml", "base.image_id"], &env);
    assert_ne!(out.code, 0, "an image id was recorded: {}", out.all());
}
