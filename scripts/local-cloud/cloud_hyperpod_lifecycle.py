"""HyperPod's lifecycle scripts, run on each node that is a host
(cloud_hyperpod_hosts.py), as HyperPod runs them.

What AWS does ("Customize SageMaker HyperPod clusters using lifecycle
scripts",
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-lifecycle-best-practices.html,
and the API reference's ClusterLifeCycleConfig,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterLifeCycleConfig.html):
on each new instance of a group, HyperPod downloads every object under the
group's LifeCycleConfig.SourceS3Uri and runs the entrypoint OnCreate from
there, as root, while the node is being provisioned (so for the nodes of
CreateCluster, of an UpdateCluster count up, and for the new instance of
BatchReplaceClusterNodes). Its output goes to CloudWatch Logs, the log
group `/aws/sagemaker/Clusters/<cluster name>/<cluster id>` with one stream
per instance, `LifecycleConfig/<instance group>/<instance id>` (the
names the HyperPod developer guide gives for debugging lifecycle scripts,
in "Customize SageMaker HyperPod clusters using lifecycle scripts" above).
A script that fails leaves its instance in the status `Failure`
(ClusterInstanceStatusDetails' values, API_ClusterInstanceStatusDetails.html),
and a CreateCluster whose nodes' scripts fail ends `Failed` with a
FailureMessage (DescribeCluster); cloud_hyperpod.py sets that.

Here: the objects are read from moto's own S3 (this module runs in moto's
process) into the host's folder (HOST["dir"]/lifecycle, under the manager's
work folder in /tmp, which the host shares with this process; its /opt is
its own root volume's, hosts/manager.py), OnCreate
runs there with `bash` in the host's namespaces (nsenter), as root, and its
output (stdout and stderr, in order) becomes the stream's events in moto's
CloudWatch Logs. What HyperPod also gives its scripts
(/opt/ml/config/resource_config.json, provisioning_parameters.json) is not
made: Slurm across the nodes is brought up by cloud_hyperpod_hosts.py.
"""

import os
import subprocess
import time

from moto.logs.models import logs_backends
from moto.s3.models import s3_backends

# How long one OnCreate may run here (AWS gives none; a script that hangs
# would hold moto's request).
TIMEOUT_S = 300


class LifecycleFailed(Exception):
    """OnCreate could not be fetched, or ended with an error; the text says which."""


def log_group(cluster):
    """The cluster's CloudWatch log group, as HyperPod names it."""
    return "/aws/sagemaker/Clusters/%s/%s" % (cluster.cluster_name, cluster.arn.split("/")[-1])


def log_stream(node):
    """The node's lifecycle stream in it."""
    return "LifecycleConfig/%s/%s" % (node.instance_group_name, node.instance_id)


def _fetch(account_id, uri, into):
    """Every object under s3://BUCKET/PREFIX of `uri` into folder `into`."""
    if not uri.startswith("s3://"):
        raise LifecycleFailed("SourceS3Uri %s is not an s3:// URI" % uri)
    bucket_name, _, prefix = uri[len("s3://"):].partition("/")
    backend = s3_backends[account_id]["aws"]
    try:
        bucket = backend.get_bucket(bucket_name)
    except Exception as e:  # moto's MissingBucket
        raise LifecycleFailed("SourceS3Uri %s: no bucket %s (%s)" % (uri, bucket_name, type(e).__name__))
    keys, _, _, _ = backend.list_objects(bucket, prefix or None, None, None, None)
    fetched = 0
    for key in keys:
        relative = key.name[len(prefix):].lstrip("/") if prefix else key.name
        if not relative or relative.endswith("/"):
            continue
        path = os.path.join(into, relative)
        if not os.path.realpath(path).startswith(os.path.realpath(into) + os.sep):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(key.value)
        fetched += 1
    return fetched


def _log(cluster, node, lines):
    backend = logs_backends[cluster.account_id][cluster.region_name]
    group, stream = log_group(cluster), log_stream(node)
    if group not in backend.groups:
        backend.create_log_group(group, {})
    backend.create_log_stream(group, stream)
    now = int(time.time() * 1000)
    events = [{"timestamp": now, "message": line} for line in lines if line] or [
        {"timestamp": now, "message": "(no output)"}]
    backend.put_log_events(group, stream, events)


def run_on_create(cluster, node, host):
    """Fetches `node`'s group's lifecycle scripts and runs OnCreate in
    `host` (the manager's HOST); its output in the log stream. Raises
    LifecycleFailed (its text the reason) when it cannot run or fails."""
    config = node.life_cycle_config or {}
    uri, entry = config.get("SourceS3Uri", ""), config.get("OnCreate") or "on_create.sh"
    into = os.path.join(host["dir"], "lifecycle")
    os.makedirs(into, exist_ok=True)
    try:
        if _fetch(cluster.account_id, uri, into) == 0 or not os.path.isfile(os.path.join(into, entry)):
            raise LifecycleFailed("no %s under %s" % (entry, uri))
        done = subprocess.run(
            ["nsenter", "-t", str(host["pid"]), "-n", "-u", "-m", "-p", "--",
             "bash", "-c", 'cd "$1" && exec bash "./$2" 2>&1', "on_create", into, entry],
            capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _log(cluster, node, ["%s did not end in %d s" % (entry, TIMEOUT_S)])
        raise LifecycleFailed("%s did not end in %d s" % (entry, TIMEOUT_S))
    except LifecycleFailed as e:
        _log(cluster, node, [str(e)])
        raise
    lines = done.stdout.splitlines()
    if done.returncode != 0:
        lines.append("%s exited with status %d" % (entry, done.returncode))
    _log(cluster, node, lines)
    if done.returncode != 0:
        raise LifecycleFailed("%s exited with status %d" % (entry, done.returncode))


def install():
    """Nothing to patch: cloud_hyperpod_hosts.py calls run_on_create for
    each node that is a host."""
    return None
