//! What an image holds reaches the instances launched from it (issue 39,
//! part 4): a playbook run by Debian's `ansible-playbook` on a builder
//! host installs a program under /opt (on PATH through /usr/local/bin) and
//! its configuration under /etc; `ec2.image` makes the AMI; a CloudFormation
//! stack launches an instance from its id, one from an image built on top
//! of it, and one from the source AMI; an `exec` step runs the program over
//! SSH on each. The machine's own / never sees what the playbooks wrote
//! (each host's root volume is its own: scripts/local-cloud/hosts/manager.py,
//! cloud_hosts_images.py). An edited playbook makes a new image, the stack
//! replaces its instances, and they run the new program.

use super::hosts::{import_key_pair, keygen};
use super::image::{BuildCloud, ec2, output, own_images, snapshots_of};
use super::support::Project;
use super::support::moto::between_all;

pub(super) const TOOL_1: &str = include_str!("../fixtures/ami/flow-tool-1.yml");
pub(super) const TOOL_2: &str = include_str!("../fixtures/ami/flow-tool-2.yml");
const PLUGIN: &str = include_str!("../fixtures/ami/flow-tool-plugin.yml");
const NODES: &str = include_str!("../fixtures/ami/nodes.yaml");

const WORKFLOW: &str = r#"[workflow]
name = "image-content"

[vars.key]
env = "NODE_KEY"

# The source AMI: Amazon Linux in moto's catalogue (its user ec2-user).
[steps.tool]
provider = "ec2.image"
[steps.tool.inputs]
name = "flow-tool"
source_ami = "ami-760aaa0f"
instance_type = "t3.micro"
playbooks = ["ansible/flow-tool.yml"]
ssh_interface = "private_ip"
ssh_timeout = 60

# An image built on the first one.
[steps.plugin]
provider = "ec2.image"
[steps.plugin.inputs]
name = "flow-tool-plugin"
source_ami = "${steps.tool.outputs.image_id}"
instance_type = "t3.micro"
playbooks = ["ansible/flow-tool-plugin.yml"]
ssh_interface = "private_ip"
ssh_timeout = 60

[steps.nodes]
provider = "cloudformation.stack"
[steps.nodes.inputs]
stack_name = "image-content"
template = "nodes.yaml"
parameters = { KeyName = "flow-key", SourceAmi = "ami-760aaa0f", ToolAmi = "${steps.tool.outputs.image_id}", PluginAmi = "${steps.plugin.outputs.image_id}" }

# Runs what the images installed, over SSH on each instance.
[steps.check]
provider = "exec"
[steps.check.inputs]
env = { KEY = "${vars.key}", SOURCE = "${steps.nodes.outputs.SourceIp}", TOOL = "${steps.nodes.outputs.ToolIp}", PLUGIN = "${steps.nodes.outputs.PluginIp}", IMAGES = "${steps.tool.outputs.image_id} ${steps.plugin.outputs.image_id}" }
run = """
on() {
    ssh -i "$KEY" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o LogLevel=ERROR -o ConnectTimeout=5 "ec2-user@$1" "$2" 2>&1 | tr '\\n' ';'
}
look='{ flow-tool; cat /opt/flow-tool/plugin /etc/flow-tool.conf; } 2>&1'
echo "tool=$(on "$TOOL" "$look")" >>"$FLOW_OUTPUT"
echo "plugin=$(on "$PLUGIN" "$look")" >>"$FLOW_OUTPUT"
echo "source=$(on "$SOURCE" "$look")" >>"$FLOW_OUTPUT"
"""
"#;

/// Where the playbooks install, on this machine's own file system.
const INSTALLED: [&str; 3] = [
    "/opt/flow-tool",
    "/usr/local/bin/flow-tool",
    "/etc/flow-tool.conf",
];

/// Which of the playbooks' paths this machine's own / has.
pub(super) fn on_this_machine() -> Vec<&'static str> {
    INSTALLED
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect()
}

/// The running instances' ids.
fn running(cloud: &BuildCloud) -> Vec<String> {
    let xml = ec2(
        &cloud.moto,
        "Action=DescribeInstances&Filter.1.Name=instance-state-name&Filter.1.Value.1=running",
    );
    between_all(&xml, "<instanceId>", "</instanceId>")
}

#[test]
fn an_images_content_reaches_its_instances_and_never_this_machine_and_an_edit_changes_it() {
    assert_eq!(
        on_this_machine(),
        Vec::<&str>::new(),
        "this machine has flow-tool installed already: the test could not tell"
    );
    let cloud = BuildCloud::start();
    let moto = &cloud.moto;
    let p = Project::new();
    p.write("wf.toml", WORKFLOW);
    p.write("nodes.yaml", NODES);
    p.write("ansible/flow-tool.yml", TOOL_1);
    p.write("ansible/flow-tool-plugin.yml", PLUGIN);
    let key = keygen(p.path(), "flow-key");
    import_key_pair(moto, "flow-key", &key);
    let key_path = key.to_string_lossy().into_owned();
    let mut env = moto.env();
    env.push(("NODE_KEY".to_string(), key_path));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let apply = || {
        let run = p.run_env(&["apply", "wf.toml", "--auto-approve"], &env);
        run.expect(0)
    };

    let first = apply();
    let tool = output(&p, moto, "tool.image_id");
    let plugin = output(&p, moto, "plugin.image_id");
    let seen = |what: &str| output(&p, moto, &format!("check.{what}"));
    let (tool_ip, plugin_ip) = (
        output(&p, moto, "nodes.ToolIp"),
        output(&p, moto, "nodes.PluginIp"),
    );
    // Launched from the image: the program the playbook installed under
    // /opt, on PATH through /usr/local/bin, reading its /etc file.
    assert_eq!(
        seen("tool"),
        format!(
            "flow-tool 1.0 (channel=stable) on ip-{}.ec2.internal;\
             cat: /opt/flow-tool/plugin: No such file or directory;channel=stable;",
            tool_ip.replace('.', "-")
        ),
        "{}",
        first.all()
    );
    // From the image built on it: both images' content, the plugin's
    // line added to the first image's configuration.
    assert_eq!(
        seen("plugin"),
        format!(
            "flow-tool 1.0 (channel=stable;plugin=on) on ip-{}.ec2.internal;\
             plugin 0.1;channel=stable;plugin=on;",
            plugin_ip.replace('.', "-")
        ),
        "{}",
        first.all()
    );
    // From the source AMI: none of it.
    let source = seen("source");
    assert!(
        source.contains("flow-tool: command not found")
            && source.contains("/opt/flow-tool/plugin: No such file or directory")
            && source.contains("/etc/flow-tool.conf: No such file or directory"),
        "{source}"
    );
    assert_eq!(on_this_machine(), Vec::<&str>::new(), "{}", first.all());

    // An edited playbook: a new image, and so a new image on top of it;
    // the stack replaces both instances, which run the new program.
    let tool_instance = output(&p, moto, "nodes.ToolId");
    p.write("ansible/flow-tool.yml", TOOL_2);
    let second = apply();
    let (new_tool, new_plugin) = (
        output(&p, moto, "tool.image_id"),
        output(&p, moto, "plugin.image_id"),
    );
    assert_ne!(new_tool, tool, "{}", second.all());
    assert_ne!(new_plugin, plugin, "{}", second.all());
    let mut images = own_images(moto);
    images.sort();
    let mut expected = vec![new_tool.clone(), new_plugin.clone()];
    expected.sort();
    assert_eq!(images, expected, "the replaced images are left");
    // Their snapshots' layers went with them (DeleteSnapshot).
    let mut kept = snapshots_of(moto, &new_tool);
    kept.extend(snapshots_of(moto, &new_plugin));
    kept.sort();
    assert_eq!(cloud.captured(), kept, "the layers the local cloud keeps");
    let new_instance = output(&p, moto, "nodes.ToolId");
    assert_ne!(new_instance, tool_instance, "{}", second.all());
    assert!(
        !running(&cloud).contains(&tool_instance),
        "the instance of the old image still runs"
    );
    assert!(
        cloud
            .hosts
            .list()
            .iter()
            .all(|h| h["id"] != tool_instance.as_str()),
        "the old instance's host is left"
    );
    let tool_seen = seen("tool");
    assert!(
        tool_seen.starts_with("flow-tool 2.0 (channel=edge) on ip-")
            && tool_seen.ends_with(";channel=edge;"),
        "{tool_seen}\n{}",
        second.all()
    );
    let plugin_seen = seen("plugin");
    assert!(
        plugin_seen.starts_with("flow-tool 2.0 (channel=edge;plugin=on) on ip-")
            && plugin_seen.ends_with(";plugin 0.1;channel=edge;plugin=on;"),
        "{plugin_seen}\n{}",
        second.all()
    );
    assert!(seen("source").contains("flow-tool: command not found"));
    assert_eq!(on_this_machine(), Vec::<&str>::new());
}
