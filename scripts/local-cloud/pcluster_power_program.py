"""ParallelCluster's Slurm power saving programs and a compute node's
boot, for clusters of dynamic nodes on local hosts (see
cloud_pcluster_power.py, which writes the wrappers that run this file
with the cluster's environment: the local cloud's HTTPS endpoint on the
bridge, its CA, FLOW_PCLUSTER_CLUSTER, FLOW_PCLUSTER_DIR, FLOW_PCLUSTER_FSX).

    resume HOSTLIST     ResumeProgram (on the head node, run by slurmctld):
                        one RunInstances per node from its compute
                        resource's launch template `<cluster>-<queue>-<cr>`,
                        tagged as ParallelCluster tags compute nodes; the
                        node -> instance mapping written to the cluster's
                        DynamoDB table `parallelcluster-<cluster>` (Id =
                        node name, InstanceId); `scontrol update
                        nodename=N nodeaddr=IP nodehostname=HOST`, as
                        ParallelCluster's slurm_resume does.
    suspend HOSTLIST    SuspendProgram: terminates the nodes' instances and
                        forgets them in the table.
    boot INSTANCE_ID    on a compute instance (the cookbook's part): the
                        cluster's /etc/hosts, /etc/slurm and shared storage
                        mounted, board_asset_tag = the instance id, munged,
                        the node name read from the table, /etc/hosts
                        extended, then slurmd -N NAME in the foreground
                        (with a boot time of now, as a new instance has).

Every AWS call goes to the local cloud through boto3, as the real
programs call AWS.
"""

import os
import re
import subprocess
import sys
import time

import boto3

NODE = re.compile(r"^(?P<queue>.+)-dy-(?P<resource>.+)-(?P<index>\d+)$")


def _env(name):
    return os.environ[name]


def _log(text):
    top = os.environ.get("FLOW_PCLUSTER_DIR", "/tmp")
    with open(os.path.join(top, "log", "power.log"), "a") as f:
        f.write("%s %s\n" % (time.strftime("%H:%M:%S"), text))


def _hostnames(hostlist):
    out = subprocess.run(
        ["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _table():
    return "parallelcluster-" + _env("FLOW_PCLUSTER_CLUSTER")


def resume(hostlist):
    cluster = _env("FLOW_PCLUSTER_CLUSTER")
    ec2 = boto3.client("ec2")
    dynamodb = boto3.client("dynamodb")
    for name in _hostnames(hostlist):
        found = NODE.match(name)
        if not found:
            _log("resume: %s is no dynamic node name" % name)
            continue
        queue, resource = found.group("queue"), found.group("resource")
        launched = ec2.run_instances(
            LaunchTemplate={
                "LaunchTemplateName": "%s-%s-%s" % (cluster, queue, resource),
                "Version": "$Latest",
            },
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "Name", "Value": "Compute"},
                        {"Key": "parallelcluster:cluster-name", "Value": cluster},
                        {"Key": "parallelcluster:node-type", "Value": "Compute"},
                        {"Key": "parallelcluster:queue-name", "Value": queue},
                        {"Key": "parallelcluster:compute-resource-name", "Value": resource},
                    ],
                }
            ],
        )["Instances"][0]
        dynamodb.put_item(
            TableName=_table(),
            Item={"Id": {"S": name}, "InstanceId": {"S": launched["InstanceId"]}},
        )
        hostname = launched["PrivateDnsName"]
        subprocess.run(
            ["scontrol", "update", "nodename=" + name, "nodeaddr=" + launched["PrivateIpAddress"],
             "nodehostname=" + hostname],
            check=True,
        )
        _log("resume: %s is %s at %s" % (name, launched["InstanceId"], launched["PrivateIpAddress"]))


def suspend(hostlist):
    ec2 = boto3.client("ec2")
    dynamodb = boto3.client("dynamodb")
    for name in _hostnames(hostlist):
        item = dynamodb.get_item(TableName=_table(), Key={"Id": {"S": name}}).get("Item")
        if item:
            ec2.terminate_instances(InstanceIds=[item["InstanceId"]["S"]])
            dynamodb.delete_item(TableName=_table(), Key={"Id": {"S": name}})
            _log("suspend: %s (%s) terminated" % (name, item["InstanceId"]["S"]))


def _sh(script):
    subprocess.run(["sh", "-c", "set -e; " + script], check=True)


ASSET_TAG = "/sys/devices/virtual/dmi/id/board_asset_tag"


def _asset_tag(instance_id):
    """The instance id at ASSET_TAG in this host's own view, as a Nitro
    instance shows it. Where the machine has no DMI table (a VM without
    one), /sys/devices/virtual is a tmpfs in this host with the machine's
    folders bound back into it and dmi/id made beside them."""
    if os.path.exists(ASSET_TAG):
        tag = "/run/board_asset_tag"
        with open(tag, "w") as f:
            f.write(instance_id + "\n")
        _sh("mount --bind %s %s" % (tag, ASSET_TAG))
        return
    _sh(
        "mkdir -p /run/sys-virtual; mount --bind /sys/devices/virtual /run/sys-virtual;"
        " mount -t tmpfs -o mode=755 sys-virtual /sys/devices/virtual;"
        " for d in /run/sys-virtual/*; do n=${d##*/}; mkdir /sys/devices/virtual/$n;"
        " mount --bind $d /sys/devices/virtual/$n; done; mkdir -p /sys/devices/virtual/dmi/id"
    )
    with open(ASSET_TAG, "w") as f:
        f.write(instance_id + "\n")


def boot(instance_id):
    top = _env("FLOW_PCLUSTER_DIR")
    mounts = "mount --bind %s/hosts /etc/hosts; mkdir -p /etc/slurm; mount --bind %s/etc /etc/slurm;" % (
        top,
        top,
    )
    mounts += " mkdir -p /run/munge; chmod 755 /run/munge;"
    for pair in filter(None, os.environ.get("FLOW_PCLUSTER_FSX", "").split(";")):
        mount_dir, folder = pair.split("=", 1)
        mounts += " mkdir -p %s; mount --bind %s %s;" % (mount_dir, folder, mount_dir)
    _sh(mounts)
    _asset_tag(instance_id)
    subprocess.Popen(
        ["/usr/sbin/munged", "-F", "--force", "--key-file=%s/munge/munge.key" % top,
         "--pid-file=/run/munge/munged.pid", "--seed-file=/run/munge/munge.seed"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dynamodb = boto3.client("dynamodb")
    name = None
    deadline = time.monotonic() + 300
    while name is None and time.monotonic() < deadline:
        items = dynamodb.scan(
            TableName=_table(),
            FilterExpression="InstanceId = :i",
            ExpressionAttributeValues={":i": {"S": instance_id}},
        ).get("Items", [])
        if items:
            name = items[0]["Id"]["S"]
        else:
            time.sleep(0.5)
    if name is None:
        _log("boot: %s got no node name" % instance_id)
        return 1
    hostname = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    address = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()[0]
    with open(os.path.join(top, "hosts"), "a") as f:
        f.write("%s\t%s %s %s\n" % (address, hostname, hostname.split(".")[0], name))
    while not os.path.exists("/run/munge/munge.socket.2") and time.monotonic() < deadline:
        time.sleep(0.05)
    _log("boot: %s is %s" % (instance_id, name))
    # A new instance has just booted; the host shares this machine's
    # kernel and so its uptime. Slurm takes a node that registers with a
    # boot time older than its power-up request for one that never
    # rebooted and keeps it POWERING_UP: slurmd runs in a time namespace
    # whose boot time is now (time_namespaces(7)).
    with open("/proc/uptime") as f:
        uptime = int(float(f.read().split()[0]))
    os.execv(
        "/usr/bin/unshare",
        ["unshare", "--time", "--boottime", str(1 - uptime), "--fork",
         "/usr/sbin/slurmd", "-D", "-N", name],
    )


def main(argv):
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "resume":
            resume(rest[0])
        elif verb == "suspend":
            suspend(rest[0])
        elif verb == "boot":
            return boot(rest[0])
        else:
            print("usage: pcluster_power_program.py resume|suspend HOSTLIST | boot ID", file=sys.stderr)
            return 2
    except Exception as e:
        _log("%s %s failed: %r" % (verb, " ".join(rest), e))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
