"""HyperPod nodes that are hosts, with Slurm across them: a node backend
for cloud_hyperpod.py's NODES seam (set_node_backend), installed only
while FLOW_LOCAL_HOSTS names a host manager (scripts/local-hosts).

- Each node launched (CreateCluster, UpdateCluster, BatchReplaceClusterNodes)
  is a host (scripts/local-cloud/hosts/manager.py) whose id is the node's
  instance id, at an address of 10.100.0.0/16, and whose hostname is the
  IP name AWS gives (`ip-10-100-0-4.ec2.internal`). A cluster created
  without VpcConfig has its nodes in a VPC SageMaker owns ("Setting up
  SageMaker HyperPod with a custom Amazon VPC",
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites.html);
  this module puts every cluster's nodes there, VpcConfig or not. The
  node's PrivatePrimaryIp and PrivateDnsHostname are the host's. No key
  pair: HyperPod nodes are reached through SSM, not SSH keys, so the
  host's sshd lets nobody in (its default user is Ubuntu's `ubuntu`, the
  DLAMI HyperPod runs).
- Once every group's nodes are launched at CreateCluster, and one group's
  name contains "controller" (the lifecycle scripts' `controller_group`,
  `controller-machine` in the published examples), Slurm is brought up
  across them (cloud_slurm_hosts.start_cluster): the controller group's
  first node is the head (munged, slurmctld), the nodes of the groups
  whose names contain neither "controller" nor "login" are compute nodes
  (munged, slurmd), in a partition named after the cluster. A cluster
  without such a group, or whose Slurm does not come up, keeps its hosts
  without Slurm, and moto's log says why.
- Each node's lifecycle script (its group's LifeCycleConfig: OnCreate
  from SourceS3Uri) runs on its host as soon as the host is up, as root,
  its output in the cluster's CloudWatch log group
  (cloud_hyperpod_lifecycle.py). A script that fails leaves the node in
  `Failure` with the reason as its message; it joins no Slurm (and a
  CreateCluster with such a node ends `Failed`: cloud_hyperpod.py).
- Nodes added to a running cluster (UpdateCluster up, the new instance of
  BatchReplaceClusterNodes) join its Slurm once their lifecycle script has
  run, under their own hostname (a new instance has a new address, so a
  replacement is a new Slurm node, and the replaced one leaves); nodes
  that leave (UpdateCluster down, BatchDeleteClusterNodes, the replaced
  instance) leave it before their host ends: slurm.conf is rewritten and
  slurmctld restarted (cloud_slurm_hosts.set_computes), as HyperPod's own
  Slurm configuration follows the cluster's instances. A node that leaves
  (also at DeleteCluster) ends its host.
"""

import ipaddress
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts"))
import hosts_client as client  # noqa: E402  (hosts/hosts_client.py)

import cloud_hyperpod  # noqa: E402
import cloud_hyperpod_lifecycle as lifecycle  # noqa: E402
import cloud_slurm_hosts  # noqa: E402

NETWORK = ipaddress.ip_network("10.100.0.0/16")


class HostNodes(cloud_hyperpod.RowNodes):
    """Every HyperPod node a host; Slurm across a new cluster's nodes."""

    def __init__(self):
        self._lock = threading.Lock()
        self._next = 4  # AWS reserves the first four addresses of a subnet

    def _address(self):
        with self._lock:
            taken = {h["ip"] for h in client.call({"op": "list"})["hosts"]}
            while True:
                ip = str(NETWORK.network_address + self._next)
                self._next += 1
                if ip not in taken:
                    return ip

    def launch(self, cluster, group, node):
        ip = self._address()
        hostname = "ip-%s.ec2.internal" % ip.replace(".", "-")
        client.call(
            {
                "op": "start",
                "hosts": [
                    {"id": node.instance_id, "ip": ip, "hostname": hostname,
                     "user": "ubuntu", "authorized_keys": "", "daemons": []}
                ],
            }
        )
        node.private_ip = ip
        node.hostname = hostname
        host = next(h for h in client.call({"op": "list"})["hosts"] if h["id"] == node.instance_id)
        try:
            lifecycle.run_on_create(cluster, node, host)
        except lifecycle.LifecycleFailed as e:
            node.status = "Failure"
            node.failure = "Lifecycle script did not run successfully: %s (log stream %s of %s)" % (
                e, lifecycle.log_stream(node), lifecycle.log_group(cluster))
            print("cloud_hyperpod_hosts: %s: %s" % (node.instance_id, node.failure), file=sys.stderr)
        if getattr(cluster, "flow_slurm", False):
            self._resize(cluster)
        else:
            self._maybe_slurm(cluster)

    def _resize(self, cluster, leaving=None):
        """The running Slurm of `cluster` made to hold its compute nodes now
        (those neither failed, shutting down, nor `leaving`)."""
        if not getattr(cluster, "flow_slurm_up", False):
            return
        computes = [
            n.instance_id
            for n in cluster.nodes.values()
            if _is_compute(n) and n is not leaving and n.status not in ("Failure", "ShuttingDown")
        ]
        try:
            cloud_slurm_hosts.set_computes(_slurm_name(cluster), computes)
            cluster.flow_slurm_ids = set(computes)
        except (cloud_slurm_hosts.SlurmHostsError, client.HostError) as e:
            print("cloud_hyperpod_hosts: Slurm on %s: %s" % (cluster.cluster_name, e), file=sys.stderr)

    def _maybe_slurm(self, cluster):
        name = cluster.cluster_name
        wanted = sum(int(g.get("TargetCount") or 0) for g in cluster.instance_groups)
        if getattr(cluster, "flow_slurm", False) or len(cluster.nodes) < wanted:
            return
        cluster.flow_slurm = True
        groups = [g["InstanceGroupName"] for g in cluster.instance_groups]
        controller = next((g for g in groups if "controller" in g.lower()), None)
        if controller is None:
            print("cloud_hyperpod_hosts: %s has no controller group; no Slurm" % name,
                  file=sys.stderr)
            return
        nodes = list(cluster.nodes.values())
        head = next(n for n in nodes if n.instance_group_name == controller)
        computes = [n.instance_id for n in nodes if _is_compute(n) and n.status != "Failure"]
        if not computes:
            print("cloud_hyperpod_hosts: %s has no worker nodes; no Slurm" % name,
                  file=sys.stderr)
            return
        try:
            cloud_slurm_hosts.start_cluster(
                _slurm_name(cluster), head.instance_id, computes, partition=name[:40]
            )
            cluster.flow_slurm_up = True
            cluster.flow_slurm_ids = set(computes)
        except (cloud_slurm_hosts.SlurmHostsError, client.HostError) as e:
            print("cloud_hyperpod_hosts: Slurm on %s: %s" % (name, e), file=sys.stderr)

    def faulty(self, cluster, node):
        """A node whose host is gone (the test stopped it: the machine died)
        fails HyperPod's basic health checks."""
        try:
            listed = client.call({"op": "list"})["hosts"]
        except client.HostError:
            return False
        return not any(h["id"] == node.instance_id for h in listed)

    def terminate(self, cluster, node):
        if node.instance_id in getattr(cluster, "flow_slurm_ids", ()):
            self._resize(cluster, leaving=node)
        try:
            client.call({"op": "stop", "ids": [node.instance_id]})
        except client.HostError as e:
            print("cloud_hyperpod_hosts: stopping %s: %s" % (node.instance_id, e),
                  file=sys.stderr)


def _is_compute(node):
    group = node.instance_group_name.lower()
    return "controller" not in group and "login" not in group


def _slurm_name(cluster):
    return cluster.cluster_name.replace(".", "-")[:40]


def install():
    """Makes HyperPod's nodes hosts, when FLOW_LOCAL_HOSTS is set now."""
    if client.socket_path() is not None:
        cloud_hyperpod.set_node_backend(HostNodes())
