"""SageMaker HyperPod cluster operations moto 5.2.5 lacks (it answers HTTP
500 to each), per the SageMaker API reference, answered in the shapes of
botocore's model of the SageMaker API (moto serialises them from it):

- UpdateCluster (API_UpdateCluster.html; the HyperPod guide's
  sagemaker-hyperpod-eks-operate-cli-command-update-cluster.html):
  InstanceGroups change existing groups in place (InstanceCount,
  InstanceType, LifeCycleConfig, ExecutionRole, ThreadsPerCore) or, under a
  name the cluster does not have, add a group (which then needs
  InstanceType and LifeCycleConfig); InstanceGroupsToDelete removes whole
  groups; NodeRecovery is kept. The whole request is checked before
  anything changes, so a refused request changes nothing:
  ValidationException for a required member missing, an instance type
  outside ClusterInstanceType's values in botocore's model (in AWS's form,
  "Value '...' at 'instanceGroups.N.member.instanceType' failed to satisfy
  constraint: ..."), a group named twice, a group both updated and
  deleted, or deleted and not there. ClusterStatus is `Updating`, and each
  changed group's Status `Updating` (TargetCount the new count,
  CurrentCount the nodes in it, Pending ones not yet), until the update
  ends; then `InService`. Nodes to add are in ListClusterNodes as
  `Pending` from the call and `Running` at the end; nodes to remove are
  `ShuttingDown`, then gone, the newest first ("SageMaker AI handles the
  termination of nodes in a way that reaches the new target instance
  counts", smcluster-scale-down.html). ConflictException while the cluster
  is not `InService`, ResourceNotFound for no such cluster (the errors the
  reference lists; the messages are this module's words).
- UpdateClusterSoftware (API_UpdateClusterSoftware.html): the cluster, the
  named groups (all when none are named) and their nodes are
  `SystemUpdating` until it ends, then `InService`/`Running`, each node's
  LastSoftwareUpdateTime set.

The node batches, in cloud_hyperpod_nodes.py:

- BatchDeleteClusterNodes (API_BatchDeleteClusterNodes.html): by NodeIds
  and/or NodeLogicalIds; answers Successful / Failed (Code `NodeIdNotFound`
  or `InvalidNodeStatus`, Message, NodeId) and SuccessfulNodeLogicalIds /
  FailedNodeLogicalIds; each deleted node's group has its TargetCount
  lowered, the node is `ShuttingDown`, then gone (after the table's
  `sagemaker.hyperpod.update` length, below).
- BatchRebootClusterNodes (API_BatchRebootClusterNodes.html) and
  BatchReplaceClusterNodes (API_BatchReplaceClusterNodes.html), 25 nodes at
  most: Successful / Failed (ErrorCode `InstanceIdNotFound` or
  `InvalidInstanceStatus`). A rebooted node keeps its InstanceId and is
  `Pending` (the status enum has no rebooting state) until the reboot ends;
  a replaced node is `ShuttingDown` and a new instance of the same group
  and configuration is `Pending` beside it, then `Running` alone.

Beside them, moto's own calls:

- DescribeClusterNode and ListClusterNodes also give each node its
  NodeLogicalId ("persists throughout its lifecycle"); node ids are of the
  reference's form `i-` and 17 hex digits (moto's own are `GROUP-N`), and
  DescribeCluster gives each group its Status and the cluster its
  NodeRecovery (CreateCluster's, which moto drops).

How long each operation lasts: with FLOW_LATENCY_MODEL naming a table
(bench/latency.toml), its [operations] rows `sagemaker.hyperpod`
(CreateCluster: `Creating` until `InService`), `sagemaker.hyperpod.update`,
`sagemaker.hyperpod.software`, `sagemaker.hyperpod.reboot` and
`sagemaker.hyperpod.replace`, divided by its scale (FLOW_LATENCY_SCALE
overrides it), counted from the call. A row the table lacks, or no table:
the operation has ended by the next call that looks at the cluster (AWS
gives no figure; this module makes none up), and CreateCluster stays as
moto makes it, `InService` at once.

A node the seam leaves in `Failure` (a host whose lifecycle script
failed) fails CreateCluster: the cluster is `Failed`, its FailureMessage
naming the node and why (ClusterStatus and ClusterInstanceStatusDetails'
values in the API reference).

Where a node comes from is one seam, NODES (`launch` and `terminate`):
by default a node is only a row. The local cloud's hosts can back nodes by
replacing it with `set_node_backend`. Every node made (CreateCluster,
UpdateCluster, BatchReplaceClusterNodes) goes through `launch`, every node
that leaves (UpdateCluster, the batches, DeleteCluster) through
`terminate`.
"""

import os
import secrets
import threading
import time
import tomllib

import botocore.session

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.sagemaker.exceptions import ConflictException, ResourceNotFound, ValidationError
from moto.sagemaker.models import Cluster, ClusterNode, SageMakerModelBackend
from moto.sagemaker.responses import SageMakerResponse

_LOCK = threading.RLock()


class RowNodes:
    """Nodes that are rows only: the default backend of NODES."""

    def launch(self, cluster, group, node):
        """`node` (a moto ClusterNode of `group`, a group dict of `cluster`)
        is being provisioned; a host backend starts its host here and may
        set `node.private_ip` and `node.hostname`."""

    def terminate(self, cluster, node):
        """`node` leaves `cluster`; a host backend stops its host here."""

    def faulty(self, cluster, node):
        """Whether `node`'s instance fails HyperPod's health checks (a host
        backend: its host is gone); rows never do."""
        return False


NODES = RowNodes()


def set_node_backend(backend):
    """Makes `backend` (with RowNodes' methods) the source of every node."""
    global NODES
    NODES = backend


# --- timing -----------------------------------------------------------------


def _table():
    path = os.environ.get("FLOW_LATENCY_MODEL")
    if not path:
        return {}, 1.0
    with open(path, "rb") as f:
        table = tomllib.load(f)
    scale = float(os.environ.get("FLOW_LATENCY_SCALE") or table.get("scale", 60))
    return table.get("operations", {}), scale


_OPERATIONS, _SCALE = _table()


def seconds(kind):
    """How long operation `kind` lasts here, or None: over by the next look."""
    real = _OPERATIONS.get(kind)
    return None if real is None else float(real) / _SCALE


# --- nodes and pending operations --------------------------------------------


def _new_instance_id():
    return "i-" + secrets.token_hex(9)[:17]


def _new_logical_id(group_name):
    return f"{group_name}-{secrets.token_hex(8)}"


def _describe_node(self):
    out = _describe_node_moto(self)
    out["NodeLogicalId"] = getattr(self, "logical_id", None)
    out["InstanceStatus"]["Message"] = getattr(self, "failure", None) or _STATUS_MESSAGES.get(self.status, "")
    if getattr(self, "software_updated", None):
        out["LastSoftwareUpdateTime"] = self.software_updated
    if getattr(self, "private_ip", None):
        out["PrivatePrimaryIp"] = self.private_ip
    if getattr(self, "hostname", None):
        out["PrivateDnsHostname"] = self.hostname
    return out


def _summary_node(self):
    out = _summary_node_moto(self)
    out["NodeLogicalId"] = getattr(self, "logical_id", None)
    out["InstanceStatus"]["Message"] = getattr(self, "failure", None) or _STATUS_MESSAGES.get(self.status, "")
    return out


_STATUS_MESSAGES = {"Running": "", "Pending": "provisioning", "ShuttingDown": "terminating",
                    "SystemUpdating": "updating its platform software"}
_describe_node_moto = ClusterNode.describe
_summary_node_moto = ClusterNode.summary


def launch(backend, cluster, group, status="Pending"):
    """A new node of `group` in `cluster`, through the NODES seam."""
    node_id = _new_instance_id()
    node = ClusterNode(
        region_name=backend.region_name,
        account_id=backend.account_id,
        cluster_name=cluster.cluster_name,
        instance_group_name=group["InstanceGroupName"],
        instance_type=group["InstanceType"],
        life_cycle_config=group["LifeCycleConfig"],
        execution_role=group["ExecutionRole"],
        node_id=node_id,
        threads_per_core=group.get("ThreadsPerCore"),
    )
    node.logical_id = _new_logical_id(group["InstanceGroupName"])
    node.status = status
    cluster.nodes[node_id] = node
    NODES.launch(cluster, group, node)
    return node


def terminate(cluster, node):
    """`node` leaves `cluster`, through the NODES seam."""
    NODES.terminate(cluster, node)
    cluster.nodes.pop(node.instance_id, None)


def _group_nodes(cluster, name, statuses=None):
    return [n for n in cluster.nodes.values() if n.instance_group_name == name
            and (statuses is None or n.status in statuses)]


def _recount(cluster):
    for g in cluster.instance_groups:
        g["CurrentCount"] = len(_group_nodes(cluster, g["InstanceGroupName"], ("Running", "SystemUpdating", "ShuttingDown")))


class Pending:
    """An operation in progress on a cluster: `finish` runs once it is over."""

    def __init__(self, kind, finish):
        length = seconds(kind)
        self.ready = time.time() + (length or 0.0)
        self.finish = finish


def _ops(cluster):
    if not hasattr(cluster, "flow_pending"):
        cluster.flow_pending = []
    return cluster.flow_pending


# Called with each cluster at every look, before its operations are settled
# (cloud_hyperpod_recovery.py's automatic node recovery).
SETTLE_HOOKS = []


def settle(cluster):
    """Ends the operations of `cluster` whose time has come."""
    with _LOCK:
        for hook in SETTLE_HOOKS:
            hook(cluster)
        now = time.time()
        pending = _ops(cluster)
        for op in [op for op in pending if op.ready <= now]:
            pending.remove(op)
            op.finish()
        if not pending and cluster.status in ("Creating", "Updating", "SystemUpdating"):
            cluster.status = "InService"
        _recount(cluster)


def _settle_all(backend):
    for cluster in list(backend.clusters.values()):
        settle(cluster)


def _cluster(backend, name):
    if name and name.startswith("arn:"):
        name = name.split("/")[-1]
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise ResourceNotFound(message=f"Cluster '{name}' does not exist.")
    settle(cluster)
    return cluster


def _in_service(cluster, action):
    if cluster.status != "InService":
        raise ConflictException(
            f"Cannot {action} cluster '{cluster.cluster_name}' while its status is {cluster.status}.")


# --- moto's own calls, seen through the seam and the pending operations -------


_create_moto = SageMakerModelBackend.create_cluster


def _create_cluster(self, cluster_name, instance_groups, vpc_config, tags):
    arn = _create_moto(self, cluster_name, instance_groups, vpc_config, tags)
    cluster = self.clusters[cluster_name]
    with _LOCK:
        # moto's rows named GROUP-N become nodes of the seam, with ids of
        # the reference's form.
        for node in list(cluster.nodes.values()):
            cluster.nodes.pop(node.instance_id)
        held = seconds("sagemaker.hyperpod") is not None
        for g in cluster.instance_groups:
            g["Status"] = "Creating" if held else "InService"
            for _ in range(g["TargetCount"]):
                launch(self, cluster, g, "Pending" if held else "Running")
        if held:
            cluster.status = "Creating"

            def created():
                for g in cluster.instance_groups:
                    g["Status"] = "InService"
                    for n in _group_nodes(cluster, g["InstanceGroupName"], ("Pending",)):
                        n.status = "Running"

            _ops(cluster).append(Pending("sagemaker.hyperpod", created))
        failed = [n for n in cluster.nodes.values() if n.status == "Failure"]
        if failed:
            # A node whose provisioning failed (its lifecycle script, on a
            # host) fails the create: DescribeCluster says `Failed` and why.
            cluster.status = "Failed"
            cluster.failure_message = "%d of %d node(s) failed: %s: %s" % (
                len(failed), len(cluster.nodes), failed[0].instance_id, getattr(failed[0], "failure", ""))
        _recount(cluster)
    return arn


def _looking(method):
    def look(self, cluster_name, *args, **kwargs):
        name = cluster_name.split("/")[-1] if cluster_name.startswith("arn:") else cluster_name
        if name in self.clusters:
            settle(self.clusters[name])
        return method(self, cluster_name, *args, **kwargs)

    return look


_delete_moto = SageMakerModelBackend.delete_cluster


def _delete_cluster(self, cluster_name):
    """DeleteCluster: its nodes leave through the seam first."""
    name = cluster_name.split("/")[-1] if cluster_name.startswith("arn:") else cluster_name
    with _LOCK:
        cluster = self.clusters.get(name)
        if cluster is not None:
            for node in list(cluster.nodes.values()):
                terminate(cluster, node)
        return _delete_moto(self, cluster_name)


def _describe_cluster(self):
    out = _describe_moto(self)
    if getattr(self, "node_recovery", None):
        out["NodeRecovery"] = self.node_recovery
    return out


_describe_moto = Cluster.describe


def _list_clusters(method):
    def listing(self, *args, **kwargs):
        _settle_all(self)
        return method(self, *args, **kwargs)

    return listing


# --- UpdateCluster ----------------------------------------------------------------


def _invalid(message):
    return ValidationError(message=message)


def _instance_types():
    """ClusterInstanceType's values in botocore's model of the SageMaker API
    (moto's own list for CreateCluster is older)."""
    global _TYPES
    if _TYPES is None:
        model = botocore.session.get_session().get_service_model("sagemaker")
        _TYPES = list(model.shape_for("ClusterInstanceType").enum)
    return _TYPES


_TYPES = None


def _check_update(cluster, groups, to_delete):
    """The refusal of this update, before anything changes."""
    existing = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
    names = [g.get("InstanceGroupName") for g in groups]
    for i, g in enumerate(groups, start=1):
        for key in ("InstanceGroupName", "InstanceCount", "ExecutionRole"):
            if g.get(key) is None:
                field = key[0].lower() + key[1:]
                raise _invalid(f"1 validation error detected: Value null at 'instanceGroups.{i}.member.{field}' "
                               "failed to satisfy constraint: Member must not be null")
        name = g["InstanceGroupName"]
        if names.count(name) > 1:
            raise _invalid(f"Instance group name {name} is given more than once.")
        if name in to_delete:
            raise _invalid(f"Instance group {name} cannot be both updated and deleted.")
        if name not in existing:
            for key in ("InstanceType", "LifeCycleConfig"):
                if g.get(key) is None:
                    raise _invalid(f"Instance group {name} does not exist in cluster {cluster.cluster_name}: "
                                   f"a new instance group needs {key}.")
        kind = g.get("InstanceType")
        if kind is not None and kind not in _instance_types():
            raise _invalid(f"1 validation error detected: Value '{kind}' at 'instanceGroups.{i}.member.instanceType' "
                           f"failed to satisfy constraint: Member must satisfy enum value set: "
                           f"[{', '.join(_instance_types())}]")
        uri = (g.get("LifeCycleConfig") or {}).get("SourceS3Uri")
        if uri is not None and not uri.startswith("s3://sagemaker-"):
            raise _invalid(f"Validation Error: SourceS3Uri {uri} does not start with 's3://sagemaker'.")
    for name in to_delete:
        if name not in existing:
            raise _invalid(f"Instance group {name} in InstanceGroupsToDelete does not exist in cluster "
                           f"{cluster.cluster_name}.")


def update_cluster(backend, name, groups, to_delete, node_recovery):
    """UpdateCluster on `backend`'s cluster `name`; its ARN."""
    with _LOCK:
        cluster = _cluster(backend, name)
        _in_service(cluster, "update")
        _check_update(cluster, groups, to_delete)
        if node_recovery:
            cluster.node_recovery = node_recovery
        existing = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
        changed = []
        for spec in groups:
            g = existing.get(spec["InstanceGroupName"])
            if g is None:
                g = {"InstanceGroupName": spec["InstanceGroupName"], "CurrentCount": 0, "TargetCount": 0,
                     "ThreadsPerCore": spec.get("ThreadsPerCore", 1), "Status": "Creating"}
                cluster.instance_groups.append(g)
            before = dict(g)
            for key in ("InstanceType", "LifeCycleConfig", "ExecutionRole", "ThreadsPerCore"):
                if spec.get(key) is not None:
                    g[key] = spec[key]
            g["TargetCount"] = spec["InstanceCount"]
            retype = before.get("InstanceType") not in (None, g["InstanceType"])
            if g != before or retype:
                g["Status"] = g.get("Status") if g.get("Status") == "Creating" else "Updating"
                changed.append((g, retype))
        leaving = []
        for g, retype in changed:
            live = sorted(_group_nodes(cluster, g["InstanceGroupName"], ("Running", "Pending")),
                          key=lambda n: n.launch_time)
            # A new instance type: every node is replaced by one of it.
            keep = [] if retype else live
            for n in live[len(keep):] + keep[g["TargetCount"]:]:
                n.status = "ShuttingDown"
                leaving.append(n)
            for _ in range(g["TargetCount"] - min(len(keep), g["TargetCount"])):
                launch(backend, cluster, g)
        for gname in to_delete:
            existing[gname]["Status"] = "Deleting"
            for n in _group_nodes(cluster, gname):
                n.status = "ShuttingDown"
                leaving.append(n)
        cluster.status = "Updating"

        def updated():
            for n in leaving:
                terminate(cluster, n)
            cluster.instance_groups[:] = [g for g in cluster.instance_groups
                                          if g["InstanceGroupName"] not in to_delete]
            for g, _ in changed:
                g["Status"] = "InService"
                for n in _group_nodes(cluster, g["InstanceGroupName"], ("Pending",)):
                    n.status = "Running"

        _ops(cluster).append(Pending("sagemaker.hyperpod.update", updated))
        _recount(cluster)
        return cluster.arn


def update_cluster_software(backend, name, groups):
    """UpdateClusterSoftware on `backend`'s cluster `name`; its ARN."""
    with _LOCK:
        cluster = _cluster(backend, name)
        _in_service(cluster, "update the software of")
        known = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
        names = [g.get("InstanceGroupName") for g in groups or []] or list(known)
        for n in names:
            if n not in known:
                raise _invalid(f"Instance group {n} does not exist in cluster {cluster.cluster_name}.")
        nodes = [n for n in cluster.nodes.values() if n.instance_group_name in names and n.status == "Running"]
        for n in nodes:
            n.status = "SystemUpdating"
        for n in names:
            known[n]["Status"] = "SystemUpdating"
        cluster.status = "SystemUpdating"

        def updated():
            now = utcnow()
            for n in nodes:
                if n.instance_id in cluster.nodes:
                    n.status = "Running"
                    n.software_updated = now
            for n in names:
                if n in known:
                    known[n]["Status"] = "InService"

        _ops(cluster).append(Pending("sagemaker.hyperpod.software", updated))
        return cluster.arn


# --- the calls ----------------------------------------------------------------------


def _update_cluster_call(self):
    arn = update_cluster(
        self.sagemaker_backend,
        self._get_param("ClusterName"),
        self._get_param("InstanceGroups") or [],
        self._get_param("InstanceGroupsToDelete") or [],
        self._get_param("NodeRecovery"),
    )
    return ActionResult({"ClusterArn": arn})


def _update_cluster_software_call(self):
    arn = update_cluster_software(
        self.sagemaker_backend, self._get_param("ClusterName"), self._get_param("InstanceGroups"))
    return ActionResult({"ClusterArn": arn})


_create_call_moto = SageMakerResponse.create_cluster


def _create_cluster_call(self):
    """CreateCluster, its NodeRecovery kept (moto drops it)."""
    result = _create_call_moto(self)
    cluster = self.sagemaker_backend.clusters.get(self._get_param("ClusterName"))
    if cluster is not None and self._get_param("NodeRecovery"):
        cluster.node_recovery = self._get_param("NodeRecovery")
    return result


def install():
    """Adds the calls to moto's SageMaker, and settles pending operations
    on every look at a cluster."""
    SageMakerResponse.create_cluster = _create_cluster_call
    SageMakerResponse.update_cluster = _update_cluster_call
    SageMakerResponse.update_cluster_software = _update_cluster_software_call
    SageMakerModelBackend.create_cluster = _create_cluster
    SageMakerModelBackend.delete_cluster = _delete_cluster
    for method in ("describe_cluster", "describe_cluster_node"):
        setattr(SageMakerModelBackend, method, _looking(getattr(SageMakerModelBackend, method)))
    # list_cluster_nodes is paginated: its cluster is settled before the pager.
    SageMakerModelBackend.list_cluster_nodes = _looking(SageMakerModelBackend.list_cluster_nodes)
    SageMakerModelBackend.list_clusters = _list_clusters(SageMakerModelBackend.list_clusters)
    Cluster.describe = _describe_cluster
    ClusterNode.describe = _describe_node
    ClusterNode.summary = _summary_node
