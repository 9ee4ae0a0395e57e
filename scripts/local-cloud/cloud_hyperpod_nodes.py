"""SageMaker HyperPod's node batches, which moto 5.2.5 lacks (HTTP 500):
BatchDeleteClusterNodes, BatchRebootClusterNodes and
BatchReplaceClusterNodes, as cloud_hyperpod.py's docstring describes them
(the API reference pages API_BatchDeleteClusterNodes.html,
API_BatchRebootClusterNodes.html, API_BatchReplaceClusterNodes.html), on
the clusters, nodes, seam and timing of cloud_hyperpod.py.
"""

from moto.core.responses import ActionResult
from moto.sagemaker.responses import SageMakerResponse

from cloud_hyperpod import _LOCK, Pending, _cluster, _invalid, _ops, _recount, launch, terminate


def _nodes_by(cluster, node_ids, logical_ids):
    """(node or None, the id asked for, whether by logical id) for each id."""
    by_logical = {getattr(n, "logical_id", None): n for n in cluster.nodes.values()}
    return ([(cluster.nodes.get(i), i, False) for i in node_ids or []]
            + [(by_logical.get(i), i, True) for i in logical_ids or []])


def _batch_answer(results, code_key):
    """The Successful/Failed lists of a batch call; lists the model makes
    at least one long (min 1) are left out when empty."""
    out = {"Successful": [], "Failed": [], "SuccessfulNodeLogicalIds": [], "FailedNodeLogicalIds": []}
    for asked, logical, error in results:
        if error is None:
            out["SuccessfulNodeLogicalIds" if logical else "Successful"].append(asked)
        else:
            code, message = error
            failed = {code_key: code, "Message": message}
            failed["NodeLogicalId" if logical else "NodeId"] = asked
            out["FailedNodeLogicalIds" if logical else "Failed"].append(failed)
    return {k: v for k, v in out.items() if v}


def _need_nodes(node_ids, logical_ids, most):
    if not node_ids and not logical_ids:
        raise _invalid("Specify NodeIds, NodeLogicalIds, or both.")
    for key, ids in (("nodeIds", node_ids), ("nodeLogicalIds", logical_ids)):
        if ids and len(ids) > most:
            raise _invalid(f"1 validation error detected: Value at '{key}' failed to satisfy constraint: "
                           f"Member must have length less than or equal to {most}")


def batch_delete_nodes(backend, name, node_ids, logical_ids):
    """BatchDeleteClusterNodes: its answer."""
    with _LOCK:
        cluster = _cluster(backend, name)
        _need_nodes(node_ids, logical_ids, 3000)
        results, leaving = [], []
        for node, asked, logical in _nodes_by(cluster, node_ids, logical_ids):
            if node is None:
                results.append((asked, logical, ("NodeIdNotFound", f"Node {asked} not found in cluster {cluster.cluster_name}.")))
            elif node.status == "ShuttingDown" or node in leaving:
                results.append((asked, logical, ("InvalidNodeStatus", f"Node {asked} is {node.status}.")))
            else:
                results.append((asked, logical, None))
                leaving.append(node)
        groups = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
        for n in leaving:
            n.status = "ShuttingDown"
            groups[n.instance_group_name]["TargetCount"] -= 1
        if leaving:
            _ops(cluster).append(Pending("sagemaker.hyperpod.update",
                                         lambda: [terminate(cluster, n) for n in leaving]))
        _recount(cluster)
        return _batch_answer(results, "Code")


def replace_nodes(backend, cluster, chosen):
    """The nodes `chosen` (Running) of `cluster` replaced, as
    BatchReplaceClusterNodes replaces them (also HyperPod's automatic node
    recovery, cloud_hyperpod_recovery.py): each `ShuttingDown`, a new
    instance of its group `Pending` beside it, then `Running` alone once
    the `sagemaker.hyperpod.replace` operation ends. The new nodes."""
    groups = {g["InstanceGroupName"]: g for g in cluster.instance_groups}
    new = []
    for n in chosen:
        n.status = "ShuttingDown"
        new.append(launch(backend, cluster, groups[n.instance_group_name]))

    def replaced():
        for n in chosen:
            terminate(cluster, n)
        for n in new:
            if n.status == "Pending":  # not one whose lifecycle script failed
                n.status = "Running"

    if chosen:
        _ops(cluster).append(Pending("sagemaker.hyperpod.replace", replaced))
    return new


def batch_reboot_or_replace(backend, name, node_ids, logical_ids, replace):
    """BatchRebootClusterNodes or BatchReplaceClusterNodes: its answer."""
    with _LOCK:
        cluster = _cluster(backend, name)
        _need_nodes(node_ids, logical_ids, 25)
        results, chosen = [], []
        for node, asked, logical in _nodes_by(cluster, node_ids, logical_ids):
            if node is None:
                results.append((asked, logical, ("InstanceIdNotFound", f"Node {asked} not found in cluster {cluster.cluster_name}.")))
            elif node.status != "Running" or node in chosen:
                results.append((asked, logical, ("InvalidInstanceStatus", f"Node {asked} is {node.status}, not Running.")))
            else:
                results.append((asked, logical, None))
                chosen.append(node)
        if replace:
            replace_nodes(backend, cluster, chosen)
        else:
            for n in chosen:
                n.status = "Pending"

            def rebooted():
                for n in chosen:
                    if n.instance_id in cluster.nodes:
                        n.status = "Running"

            if chosen:
                _ops(cluster).append(Pending("sagemaker.hyperpod.reboot", rebooted))
        _recount(cluster)
        return _batch_answer(results, "ErrorCode")



def _batch_delete_call(self):
    return ActionResult(batch_delete_nodes(
        self.sagemaker_backend, self._get_param("ClusterName"),
        self._get_param("NodeIds"), self._get_param("NodeLogicalIds")))


def _batch_call(replace):
    def call(self):
        return ActionResult(batch_reboot_or_replace(
            self.sagemaker_backend, self._get_param("ClusterName"),
            self._get_param("NodeIds"), self._get_param("NodeLogicalIds"), replace))

    return call


def install():
    """Adds the three calls to moto's SageMaker."""
    SageMakerResponse.batch_delete_cluster_nodes = _batch_delete_call
    SageMakerResponse.batch_reboot_cluster_nodes = _batch_call(False)
    SageMakerResponse.batch_replace_cluster_nodes = _batch_call(True)
