"""ParallelCluster's clustermgtd replacing unhealthy static nodes, for
clusters whose static nodes are local hosts (cloud_pcluster_slurm.py).

What AWS documents, and what is modelled here:

- Static nodes "are not terminated by the system, unless a particular
  event or condition occurs. Such events include, for example, the
  failure of Slurm or Amazon EC2 health checks and the change of the
  Slurm node status to DRAIN or DOWN" ("Slurm Workload Manager (slurm)",
  Cluster capacity size and update,
  https://docs.aws.amazon.com/parallelcluster/latest/ug/slurm-workload-manager-v3.html);
  "If the node is a static node, it's replaced" (multi-node job
  interrupted, https://docs.aws.amazon.com/parallelcluster/latest/ug/multi-node-v3.html).
  clustermgtd, the head node's daemon that manages the compute fleet
  (https://docs.aws.amazon.com/parallelcluster/latest/ug/processes-v3.html),
  does it in its loop, every `loop_time` seconds, 60 by default
  (aws-parallelcluster-node, src/slurm_plugin/clustermgtd.py, LOOP_TIME):
  a static node whose Slurm state is DOWN, or DRAIN with no job left
  (drained), is unhealthy (its defaults `terminate_down_nodes` and
  `terminate_drain_nodes`, both true); a node still running jobs while
  draining is left until they end.
- Each unhealthy static node is set DOWN with the reason "Static node
  maintenance: unhealthy node is being replaced", its instance terminated
  (the host goes; its tags dropped at once, as EC2 drops a terminated
  instance's "after a short while": `_untag`), and a new instance launched from the compute
  resource's launch template (cloud_pcluster_slurm.launch: tagged as
  ParallelCluster tags compute nodes), a new host at a new private
  address; which instance is which node is written to the cluster's
  DynamoDB table `parallelcluster-<cluster>` (item Id = node name,
  InstanceId, HeadNodePrivateIp, HeadNodeHostname), and Slurm is told the
  node's new address: `scontrol update nodename=N nodeaddr=IP
  nodehostname=HOST` (ParallelCluster's instance manager, as
  pcluster_power_program.py does for dynamic nodes). The node keeps its
  name, `<queue>-st-<compute resource>-<N>`.
- The new instance's boot (the cookbook's part): the cluster's files,
  munged and `slurmd -N N` (cloud_slurm_hosts.move_node), then
  `scontrol update nodename=N state=resume reason='Node start up'`, which
  the cookbook's compute node init runs for a static node
  (aws-parallelcluster-cookbook, its `resume_node` step): the node is back
  in service, idle.
- The initial static nodes are written to the table too, when the head
  node boots.
- Nothing happens while the compute fleet is not RUNNING (the table's
  COMPUTE_FLEET status, cloud_pcluster_head_node.py): a stopped fleet's
  nodes are not replaced.

Each replacement is logged, one line per step, in the cluster's
slurm/CLUSTER/log/clustermgtd.log (under the host manager's work folder),
as clustermgtd logs to /var/log/parallelcluster/clustermgtd on the head
node:
    HH:MM:SS unhealthy static node N (drained: flow: …)
    HH:MM:SS N: set DOWN; terminating i-OLD (10.0.0.5)
    HH:MM:SS N: launched i-NEW at 10.0.0.9 (ip-10-0-0-9.ec2.internal)
    HH:MM:SS N: resumed on i-NEW

The loop's period and a launch EC2 has no capacity for are set by
FLOW_CLUSTERMGTD_LOOP_S and FLOW_CLUSTERMGTD_NO_CAPACITY (above). Not modelled: EC2 health checks and scheduled events, Slurm nodes that
fail to register (node_replacement_timeout), the protected mode's count
of failed launches, dynamic nodes (cloud_pcluster_power.py's).
"""

import os
import threading
import time

from moto.dynamodb.models import dynamodb_backends
from moto.ec2.models import ec2_backends

import cloud_hosts
import cloud_pcluster_head_node as head_node
import cloud_pcluster_slurm
import cloud_slurm_hosts as slurm

# clustermgtd's loop_time (seconds): 60 by default, as clustermgtd's; a
# cluster's clustermgtd configuration may set another, and so may a test
# (FLOW_CLUSTERMGTD_LOOP_S).
LOOP_S = float(os.environ.get("FLOW_CLUSTERMGTD_LOOP_S") or 60)
# EC2 out of capacity for a replacement's new instance: while the file that
# FLOW_CLUSTERMGTD_NO_CAPACITY names exists, the launch is refused
# (InsufficientInstanceCapacity) and clustermgtd tries it again on its next
# loop, as it retries a failed launch: the node DOWN at its old address, no
# instance of the cluster there. A test takes the capacity away and gives it
# back by making and removing the file; by default there is capacity.
NO_CAPACITY = os.environ.get("FLOW_CLUSTERMGTD_NO_CAPACITY")
REASON = "Static node maintenance: unhealthy node is being replaced"


def _log(cluster, text):
    with open(os.path.join(cluster["dir"], "log", "clustermgtd.log"), "a") as f:
        f.write("%s %s\n" % (time.strftime("%H:%M:%S"), text))


def _scontrol(cluster, *args):
    done = slurm._enter(cluster["head"], ["scontrol"] + list(args), timeout=30)
    if done.returncode != 0:
        raise RuntimeError("scontrol %s: %s" % (" ".join(args), done.stderr.strip()))


def _record(account_id, region_name, cluster, node, instance_id):
    """The node -> instance item of the cluster's table, as ParallelCluster
    writes it when it launches a node."""
    head = cluster["head"]
    try:
        dynamodb_backends[account_id][region_name].put_item(
            head_node.TABLE_PREFIX + cluster["name"],
            {
                "Id": {"S": node},
                "InstanceId": {"S": instance_id},
                "HeadNodePrivateIp": {"S": head["ip"]},
                "HeadNodeHostname": {"S": head["hostname"]},
            },
        )
    except Exception as e:  # a stack without its table: nothing to record
        _log(cluster, "no table for %s: %s" % (node, e))


def _untag(ec2, instance_id):
    """A terminated instance's tags gone: "Resources (such as tags) are
    gradually disassociated from the terminated instance and may no longer
    be visible on the terminated instance after a short while" ("Terminate
    Amazon EC2 instances",
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/terminating-instances.html).
    AWS gives no figure for the while; here they are gone at once, so the
    old instance is gone from a listing by the cluster's tags (what
    clustermgtd and `pcluster describe-cluster-instances` list) as soon as
    clustermgtd terminated it."""
    try:
        keys = list(ec2.tags.get(instance_id, {}))
        if keys:
            ec2.delete_tag_keys([instance_id], keys)
    except Exception as e:  # the replacement goes on; the tags stay
        print("cloud_pcluster_static: untagging %s: %s" % (instance_id, e), flush=True)


def unhealthy(states):
    """The nodes of STATES ({name: (state, reason)}, as sinfo's %T and %E
    give them) clustermgtd replaces: DOWN, or drained (DRAIN, no job)."""
    return sorted(
        name
        for name, (state, _) in states.items()
        if state.rstrip("*~#%!").startswith("down") or state.rstrip("*") == "drained"
    )


def _states(cluster):
    done = slurm._enter(cluster["head"], ["sinfo", "-h", "-N", "-o", "%N|%T|%E"], timeout=10)
    states = {}
    for line in done.stdout.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            states[parts[0]] = (parts[1], parts[2])
    return states


def _replace(account_id, region_name, cluster, name, why):
    """One unhealthy static node replaced (see the module's docstring)."""
    ec2 = ec2_backends[account_id][region_name]
    config = cloud_pcluster_slurm._config(account_id, cluster["name"]) or {}
    where = {n[0]: n[1:] for n in cloud_pcluster_slurm.static_nodes(config)}
    if name not in where:
        _log(cluster, "%s is no static node of the configuration: left" % name)
        return
    queue, resource, subnet = where[name]
    old = next(n for n in cluster["nodes"] if n["name"] == name)
    _log(cluster, "unhealthy static node %s (%s)" % (name, why))
    _scontrol(cluster, "update", "nodename=%s" % name, "state=down", "reason=%s" % REASON)
    _log(cluster, "%s: set DOWN; terminating %s (%s)" % (name, old["id"], old["ip"]))
    ec2.terminate_instances([old["id"]])
    _untag(ec2, old["id"])
    if NO_CAPACITY and os.path.exists(NO_CAPACITY):
        _log(cluster, "%s: InsufficientInstanceCapacity for its new instance; retried every loop" % name)
        while os.path.exists(NO_CAPACITY):
            time.sleep(min(LOOP_S, 1.0))
    (new,) = cloud_pcluster_slurm.launch(ec2, cluster["name"], queue, resource, subnet, 1)
    _record(account_id, region_name, cluster, name, new.id)
    _log(cluster, "%s: launched %s at %s (%s)" % (name, new.id, new.private_ip, new.private_dns_name))
    _scontrol(cluster, "update", "nodename=%s" % name, "nodeaddr=%s" % new.private_ip,
              "nodehostname=%s" % new.private_dns_name)
    slurm.move_node(cluster["name"], name, new.id)
    _scontrol(cluster, "update", "nodename=%s" % name, "state=resume", "reason=Node start up")
    _log(cluster, "%s: resumed on %s" % (name, new.id))


def maintain(account_id, region_name, cluster):
    """One pass of clustermgtd's loop over the cluster's static nodes."""
    status = head_node.fleet_status(account_id, region_name, cluster["name"])
    if status not in (None, "RUNNING"):
        return
    states = _states(cluster)
    ours = {n["name"] for n in cluster["nodes"]}
    for name in unhealthy({k: v for k, v in states.items() if k in ours}):
        state, reason = states[name]
        try:
            _replace(account_id, region_name, cluster, name, "%s: %s" % (state, reason))
        except Exception as e:  # logged, and tried again next loop
            _log(cluster, "replacing %s failed: %s" % (name, e))


def _loop(account_id, region_name, name):
    while True:
        time.sleep(LOOP_S)
        cluster = slurm._CLUSTERS.get(name)
        if cluster is None or cloud_hosts.host(cluster["head"]["id"]) is None:
            return  # the cluster, or its head node, is gone
        try:
            maintain(account_id, region_name, cluster)
        except Exception as e:
            _log(cluster, "loop: %s" % e)


def _on_head_node(account_id, region_name, name, head_id):
    cluster = slurm._CLUSTERS.get(name)
    if cluster is None or cluster["head"]["id"] != head_id:
        return  # no static nodes on hosts
    for node in cluster["nodes"]:
        _record(account_id, region_name, cluster, node["name"], node["id"])
    threading.Thread(target=_loop, args=(account_id, region_name, name), daemon=True).start()


def install():
    """Runs clustermgtd's loop for each cluster whose static nodes are
    hosts, from its head node's boot (after cloud_pcluster_slurm.py's)."""
    if slurm.enabled():
        head_node.HEAD_NODE_HOOKS.append(_on_head_node)
