"""Slurm's side of `pcluster update-compute-fleet` on a cluster whose
static nodes are hosts (cloud_pcluster_slurm.py): a stop takes the nodes
out of service, a start brings them back on new instances, launched from
the compute resource's launch template as it is then (so a queue's
`Image.CustomAmi` changed by an update made with the fleet stopped is the
image of the nodes after the start).

What AWS does ("pcluster update-compute-fleet",
https://docs.aws.amazon.com/parallelcluster/latest/ug/pcluster.update-compute-fleet-v3.html;
"ParallelCluster processes", clusterstatusmgtd and clustermgtd,
https://docs.aws.amazon.com/parallelcluster/latest/ug/processes-v3.html;
"Slurm cluster protection mode",
https://docs.aws.amazon.com/parallelcluster/latest/ug/slurm-protected-mode-v3.html):

- STOP_REQUESTED: clusterstatusmgtd sets every Slurm partition INACTIVE
  and powers its nodes down, then the compute instances are terminated
  and the status becomes STOPPED (the termination is
  cloud_pcluster_head_node.py's, between STOPPING and STOPPED);
- START_REQUESTED: clusterstatusmgtd sets the partitions UP again and the
  status RUNNING; clustermgtd then finds each static node without a
  backing instance and launches one for it, from the compute resource's
  launch template, under the node's name ("static node maintenance").

Here, run from cloud_pcluster_head_node.py's FLEET_HOOKS:

- at STOPPING the cluster's partition is set INACTIVE and each static node
  DOWN with the reason `Compute fleet stopped` (the nodes of this model
  are not CLOUD nodes, so they have no POWER_DOWN state: DOWN is a node
  with no instance behind it);
- at STARTING the partition is set UP; the DOWN static nodes are then
  replaced by clustermgtd's loop (cloud_pcluster_static.py, every
  FLOW_CLUSTERMGTD_LOOP_S once the status is RUNNING), which launches
  each node's new instance from the launch template's latest version,
  moves the node onto it (slurmd started there) and resumes it.

Without this, a stopped fleet's static nodes stayed in service in Slurm
with no instance behind them until slurmctld found them not responding
(SlurmdTimeout) and set them DOWN, and clustermgtd replaced them only
then: in tests/e2e_hosts/image_cluster.rs about 30 s after the fleet was
RUNNING again, against 6-8 s here.

A cluster whose nodes are not hosts, or that has no static nodes
(cloud_pcluster_power.py's dynamic nodes), is left to what
cloud_pcluster_head_node.py does.
"""

import cloud_pcluster_head_node as head_node
import cloud_slurm_hosts as slurm

REASON = "Compute fleet stopped"


def _scontrol(cluster, *args):
    done = slurm._enter(cluster["head"], ["scontrol"] + list(args), timeout=30)
    if done.returncode != 0:
        raise RuntimeError("scontrol %s: %s" % (" ".join(args), done.stderr.strip()))


def _on_status(account_id, region_name, name, status):
    cluster = slurm._CLUSTERS.get(name)
    if cluster is None:
        return  # no static nodes on hosts
    if status == "STOPPING":
        _scontrol(cluster, "update", "partitionname=%s" % cluster["partition"], "state=inactive")
        for node in cluster["nodes"]:
            _scontrol(cluster, "update", "nodename=%s" % node["name"], "state=down",
                      "reason=%s" % REASON)
    elif status == "STARTING":
        _scontrol(cluster, "update", "partitionname=%s" % cluster["partition"], "state=up")


def install():
    if slurm.enabled():
        head_node.FLEET_HOOKS.append(_on_status)
