"""A ParallelCluster queue of dynamic nodes on local hosts: Slurm's power
saving powers them up through the local cloud, as on AWS.

On AWS a compute resource's nodes above MinCount are dynamic: slurm.conf
declares them `State=CLOUD`, named `<queue>-dy-<compute resource>-<N>`
(static ones `-st-`), and they sit powered down (`idle~`) until a job
wants them. Slurm's power saving then runs ParallelCluster's ResumeProgram
(slurm_resume), which launches one instance per node from the compute
resource's launch template (`<cluster>-<queue>-<compute resource>`),
records which instance is which node in the cluster's DynamoDB table and
sets the node's address with `scontrol update`; the instance boots,
reads its node name from the table and starts slurmd; idle nodes are
powered down again after ScaledownIdletime by the SuspendProgram, which
terminates them ("Slurm cluster protection mode"/"Slurm guide for
multiple queue mode",
https://docs.aws.amazon.com/parallelcluster/latest/ug/multiple-queue-mode-slurm-user-guide-v3.html:
node names, states `idle~`/`alloc#`/`idle%`, "Dynamic nodes ... are
launched when jobs are submitted and terminated after ScaledownIdletime";
Slurm's own power saving, https://slurm.schedmd.com/power_save.html).

Here, when FLOW_LOCAL_HOSTS names a host manager and the local cloud also
answers over HTTPS on the bridge (cloud_https.py, with
FLOW_LOCAL_CLOUD_TLS_CA naming the CA of its certificate, so that the
hosts reach it as nodes reach AWS's endpoints), the head node's boot of a
cluster whose queues have no static nodes (MinCount 0 everywhere; static
nodes are cloud_pcluster_slurm.py's) does what the cookbook does:

- slurm.conf (in the manager's work folder, slurm/CLUSTER, bind-mounted
  at /etc/slurm on the head and every node, as cloud_slurm_hosts.py does)
  declares each compute resource's MaxCount nodes as CLOUD nodes, CPUs =
  the instance type's default vCPUs from DescribeInstanceTypes (the host
  stands in for the instance: `SlurmdParameters=config_overrides`), the
  features ParallelCluster gives them (dynamic, the instance type, the
  compute resource, efa), one partition per queue (`OverSubscribe=EXCLUSIVE`
  where JobExclusiveAllocation is true), SuspendTime = ScaledownIdletime,
  and pcluster_power_program.py (beside this file) as ResumeProgram and
  SuspendProgram; munged and slurmctld run on the head;
- every SharedStorage FsxLustre file system is one folder of the work
  folder (fsx/FS-ID), bind-mounted at its MountDir on the head and on
  every node, so what one node writes there the others read, as on a
  Lustre mount (the empty mount point is made on this machine's /);
- a compute instance of such a cluster boots running
  `pcluster_power_program.py boot` (the cookbook's part): it mounts the
  cluster's files, shows its instance id at
  /sys/devices/virtual/dmi/id/board_asset_tag as a Nitro instance does
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/identify_ec2_instances.html),
  starts munged, waits for its node name in the cluster's table, adds
  itself to the cluster's /etc/hosts and runs `slurmd -N NAME`.

The hosts run as uid 0 (cloud_hosts.py); Open MPI refuses root unless
OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are set, so the
cluster's TaskProlog exports both to every task: on AWS the user is
ec2-user and nothing is needed.

Not modelled: static and dynamic nodes in one cluster, several subnets per
queue, the EBS SharedStorage (/apps), ResumeFailProgram.
"""

import os
import sys
import threading
import time

from moto.ec2.models import ec2_backends

import cloud_hosts
import cloud_pcluster_head_node
import cloud_pcluster_slurm
import cloud_slurm_hosts as slurm

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "pcluster_power_program.py")
# cluster name -> {"dir", "fsx": {mount dir: folder}, "queues"}
CLUSTERS = {}
_LOCK = threading.Lock()

SLURM_CONF = """\
# slurm.conf of ParallelCluster cluster {name} on local hosts
# (scripts/local-cloud/cloud_pcluster_power.py)
ClusterName={name}
SlurmctldHost={head_name}({head_ip})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={dir}/bin/task-prolog
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=1
SlurmdTimeout=180
MinJobAge=86400
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/log/jobcomp.txt
CommunicationParameters=NoAddrCache
SlurmdParameters=config_overrides
# Power saving, as ParallelCluster writes it (its defaults).
SuspendProgram={dir}/bin/suspend
ResumeProgram={dir}/bin/resume
SuspendTimeout=120
ResumeTimeout=1800
SuspendTime={suspend_s}
ResumeRate=0
SuspendRate=0
TreeWidth=30000
SlurmctldParameters=idle_on_node_suspend,power_save_min_interval=30
{nodes}
"""


def _vcpus(ec2, instance_type):
    for found in ec2.describe_instance_types([instance_type]):
        vcpu = found.get("VCpuInfo", {}).get("DefaultVCpus")
        if vcpu:
            return int(vcpu)
    return 1


def dynamic_queues(config):
    """[(queue, [(compute resource, instance type, MaxCount, efa,
    exclusive)])] of a cluster configuration whose nodes are all dynamic;
    [] otherwise."""
    queues = []
    for queue in (config.get("Scheduling") or {}).get("SlurmQueues") or []:
        resources = []
        for resource in queue.get("ComputeResources") or []:
            if int(resource.get("MinCount") or 0) != 0:
                return []
            resources.append(
                (
                    resource["Name"],
                    resource.get("InstanceType") or "c5.large",
                    int(resource.get("MaxCount") or 10),
                    bool((resource.get("Efa") or {}).get("Enabled")),
                    bool(queue.get("JobExclusiveAllocation")),
                )
            )
        queues.append((queue["Name"], resources))
    return queues


def _nodes_conf(ec2, queues):
    lines, first = [], True
    for queue, resources in queues:
        names = []
        for resource, itype, count, efa, _ in resources:
            nodes = "%s-dy-%s-[1-%d]" % (queue, resource, count)
            names.append(nodes)
            features = ["dynamic", itype, resource] + (["efa"] if efa else [])
            lines.append(
                "NodeName=%s CPUs=%d State=CLOUD Feature=%s"
                % (nodes, _vcpus(ec2, itype), ",".join(features))
            )
        exclusive = any(r[4] for r in resources)
        lines.append(
            "PartitionName=%s Nodes=%s%s MaxTime=INFINITE State=UP%s"
            % (
                queue,
                ",".join(names),
                " Default=YES" if first else "",
                " OverSubscribe=EXCLUSIVE" if exclusive else "",
            )
        )
        first = False
    return "\n".join(lines)


def _program(top, verb, env):
    """top/bin/VERB: runs pcluster_power_program.py VERB with ENV."""
    exports = "".join("export %s='%s'\n" % (k, v) for k, v in sorted(env.items()))
    slurm._write(
        os.path.join(top, "bin", verb),
        "#!/bin/sh\n%sexec %s %s %s \"$@\"\n" % (exports, sys.executable, PROGRAM, verb),
        0o755,
    )


def _cloud_env(account_id, region_name, cluster, top):
    where = os.environ.get("FLOW_LOCAL_CLOUD_HTTPS", "")
    return {
        "AWS_ENDPOINT_URL": "https://%s" % where,
        "AWS_CA_BUNDLE": os.environ.get("FLOW_LOCAL_CLOUD_TLS_CA", ""),
        "AWS_ACCESS_KEY_ID": "local-cloud-head-node",
        "AWS_SECRET_ACCESS_KEY": "local-cloud-head-node",
        "AWS_DEFAULT_REGION": region_name,
        "AWS_REGION": region_name,
        "AWS_EC2_METADATA_DISABLED": "true",
        "FLOW_PCLUSTER_CLUSTER": cluster,
        "FLOW_PCLUSTER_DIR": top,
        "FLOW_PCLUSTER_FSX": ";".join(
            "%s=%s" % kv for kv in sorted(CLUSTERS[cluster]["fsx"].items())
        ),
    }


def enabled():
    """Whether dynamic nodes can be hosts: a host manager, and the local
    cloud on HTTPS with its CA named (the nodes' programs call it)."""
    return (
        slurm.enabled()
        and bool(os.environ.get("FLOW_LOCAL_CLOUD_HTTPS"))
        and bool(os.environ.get("FLOW_LOCAL_CLOUD_TLS_CA"))
    )


def _on_head_node(account_id, region_name, cluster, head_id):
    config = cloud_pcluster_slurm._config(account_id, cluster) or {}
    queues = dynamic_queues(config)
    if not queues or not enabled():
        return
    head = cloud_hosts.host(head_id)
    if head is None:
        raise RuntimeError("the head node %s of %s is no host" % (head_id, cluster))
    ec2 = ec2_backends[account_id][region_name]
    work = os.path.dirname(os.path.dirname(head["dir"]))
    top = os.path.join(work, "slurm", cluster)
    for sub in ("etc", "state", "spool", "log", "munge", "bin"):
        os.makedirs(os.path.join(top, sub), exist_ok=True)
    os.chmod(os.path.join(top, "munge"), 0o700)
    fsx = {}
    for storage in config.get("SharedStorage") or []:
        if storage.get("StorageType") == "FsxLustre":
            fs_id = (storage.get("FsxLustreSettings") or {}).get("FileSystemId") or storage["Name"]
            folder = os.path.join(work, "fsx", fs_id)
            os.makedirs(folder, exist_ok=True)
            fsx[storage["MountDir"]] = folder
    with _LOCK:
        CLUSTERS[cluster] = {"dir": top, "fsx": fsx, "queues": queues}
    _write_files(ec2, config, cluster, head, top, queues, _cloud_env(account_id, region_name, cluster, top))
    _start_head(head, top, fsx)


def _write_files(ec2, config, cluster, head, top, queues, env):
    """The cluster's programs, slurm.conf, /etc/hosts and munge key."""
    for verb in ("resume", "suspend", "boot"):
        _program(top, verb, env)
    slurm._write(
        os.path.join(top, "bin", "task-prolog"),
        "#!/bin/sh\necho export OMPI_ALLOW_RUN_AS_ROOT=1\necho export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n",
        0o755,
    )
    scaledown_min = int(((config.get("Scheduling") or {}).get("SlurmSettings") or {}).get("ScaledownIdletime") or 10)
    slurm._write(
        os.path.join(top, "etc", "slurm.conf"),
        SLURM_CONF.format(
            name=cluster,
            head_name=slurm._short(head["hostname"]),
            head_ip=head["ip"],
            dir=top,
            suspend_s=scaledown_min * 60,
            nodes=_nodes_conf(ec2, queues),
        ),
    )
    slurm._write(
        os.path.join(top, "hosts"),
        "127.0.0.1\tlocalhost\n%s\t%s %s\n"
        % (head["ip"], head["hostname"], slurm._short(head["hostname"])),
    )
    key = os.path.join(top, "munge", "munge.key")
    if not os.path.exists(key):
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
    os.chmod(key, 0o400)


def _start_head(head, top, fsx):
    """The head node's /etc/slurm, /etc/hosts and shared storage, then
    munged and slurmctld; returns once slurmctld answers."""
    slurm._prepare(head, top)
    mounts = "".join(
        "mkdir -p %s && mount --bind %s %s; " % (d, folder, d) for d, folder in sorted(fsx.items())
    )
    if mounts:
        done = slurm._enter(head, ["sh", "-c", "set -e; " + mounts])
        if done.returncode != 0:
            raise RuntimeError("mounting the shared storage on the head node: %s" % done.stderr)
    slurm._munged(head, top)
    socket_file = "/proc/%d/root%s" % (head["pid"], slurm.MUNGE_SOCKET)
    deadline = time.monotonic() + 30
    slurm._wait(
        "munged on the head node",
        lambda: os.path.exists(socket_file),
        deadline,
        lambda: slurm._tail(os.path.join(head["dir"], "munged.log")),
    )
    slurm._daemon(head, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"])
    slurm._wait(
        "slurmctld on the head node",
        lambda: "UP" in slurm._enter(head, ["scontrol", "ping"], timeout=10).stdout,
        time.monotonic() + 30,
        lambda: slurm._tail(os.path.join(top, "log", "slurmctld.log")),
    )


def _boot_daemons(instance):
    """The cookbook's part on a compute instance of a cluster here."""
    tags = {t["key"]: t["value"] for t in instance.get_tags()}
    cluster = tags.get("parallelcluster:cluster-name")
    if tags.get("parallelcluster:node-type") != "Compute" or cluster not in CLUSTERS:
        return []
    top = CLUSTERS[cluster]["dir"]
    return [{"name": "node_boot", "argv": [os.path.join(top, "bin", "boot"), instance.id], "env": {}}]


def install():
    """Registers the head node's boot and the compute nodes' (only while
    hosts are enabled)."""
    if slurm.enabled():
        cloud_pcluster_head_node.HEAD_NODE_HOOKS.append(_on_head_node)
        # An update's new queue sizes reach slurm.conf the same way.
        cloud_pcluster_head_node.UPDATE_HOOKS.append(_on_head_node)
        cloud_hosts.on_boot(_boot_daemons)
