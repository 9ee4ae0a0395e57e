"""SageMaker HyperPod's automatic node recovery, for clusters created or
updated with NodeRecovery `Automatic`.

What AWS documents ("Automatic node recovery and auto-resume",
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-resiliency-slurm-auto-resume.html;
CreateCluster's NodeRecovery, API_CreateCluster.html): "If set to
`Automatic`, SageMaker HyperPod reboots or replaces faulty nodes
automatically"; it "runs when issues are found from health-monitoring
agent, basic health checks, and deep health checks". With `None`, faulty
nodes are left to the cluster's administrators (BatchReplaceClusterNodes,
BatchRebootClusterNodes).

What is modelled: a `Running` node whose instance fails the basic health
checks (the NODES seam's `faulty`: on hosts, its host is gone, as a
machine that died is) is replaced as BatchReplaceClusterNodes replaces one
(cloud_hyperpod_nodes.replace_nodes): `ShuttingDown`, a new instance of its
group `Pending` beside it (a new host that runs the lifecycle script and
joins the cluster's Slurm under its own hostname, the old node leaving
Slurm's configuration: cloud_hyperpod_hosts.py), then `Running` alone when
the `sagemaker.hyperpod.replace` operation of the latency table ends. No
call is made for it: BatchReplaceClusterNodes for the old node is then
answered per node `InvalidInstanceStatus` (`ShuttingDown`) or
`InstanceIdNotFound` (gone), as for any node that is not `Running`
(API_BatchReplaceClusterNodes.html's Failed list).

When: AWS gives no figure for how soon a fault is found; as every
operation without a row in the latency table (cloud_hyperpod.py), a fault
is found by the next look at the cluster (any call that reads it). The
choice between a reboot and a replacement is HyperPod's; a machine that is
gone cannot be rebooted, so it is replaced. Not modelled: the deep health
checks, the health-monitoring agent's GPU and EFA faults (a node whose
host lives is never faulty here), reboots.

Each recovery is one line of moto's log (its standard error), for tests
to read what HyperPod did:
    cloud_hyperpod_recovery: HH:MM:SS CLUSTER: automatic node recovery: i-OLD (HOSTNAME) replaced by i-NEW (HOSTNAME)
"""

import sys
import time

from moto.sagemaker.models import sagemaker_backends

import cloud_hyperpod
from cloud_hyperpod_nodes import replace_nodes


def _say(cluster, text):
    print("cloud_hyperpod_recovery: %s %s: automatic node recovery: %s" % (
        time.strftime("%H:%M:%S"), cluster.cluster_name, text), file=sys.stderr, flush=True)


def recover(cluster):
    """Replaces the faulty `Running` nodes of `cluster`, if its NodeRecovery
    is `Automatic` (called at every look, cloud_hyperpod.SETTLE_HOOKS)."""
    if getattr(cluster, "node_recovery", None) != "Automatic":
        return
    faulty = [n for n in list(cluster.nodes.values())
              if n.status == "Running" and cloud_hyperpod.NODES.faulty(cluster, n)]
    if not faulty:
        return
    backend = sagemaker_backends[cluster.account_id][cluster.region_name]
    new = replace_nodes(backend, cluster, faulty)
    for old, n in zip(faulty, new):
        _say(cluster, "%s (%s) replaced by %s (%s)" % (
            old.instance_id, getattr(old, "hostname", None) or "-",
            n.instance_id, getattr(n, "hostname", None) or "-"))


def install():
    """Automatic node recovery at every look at a cluster."""
    cloud_hyperpod.SETTLE_HOOKS.append(recover)
