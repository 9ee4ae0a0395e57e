"""A ParallelCluster head node that runs Slurm, on local hosts: when
FLOW_LOCAL_HOSTS names a host manager (cloud_hosts.py), the head node's
boot (cloud_pcluster_head_node.py's HEAD_NODE_HOOKS) does what
ParallelCluster's daemons do on AWS before the stack completes:

- clustermgtd launches each compute resource's static nodes, MinCount of
  them, from the compute resource's launch template, in the queue's first
  subnet ("Slurm cluster protection mode" and "clustermgtd" in
  https://docs.aws.amazon.com/parallelcluster/latest/ug/slurm-workload-manager-v3.html
  and https://docs.aws.amazon.com/parallelcluster/latest/ug/processes-v3.html:
  "clustermgtd ... launches static nodes"); each is tagged as
  ParallelCluster tags its compute nodes (`parallelcluster:node-type =
  Compute`, cluster, queue and compute resource names), so the fleet stop
  terminates them. The counts come from the cluster configuration
  pcluster stored in its bucket (`.../clusters/NAME-…/configs/cluster-config.yaml`),
  the launch template from its instance tags. moto runs each instance, and
  cloud_hosts.py makes it a host;
- the head node runs munged and slurmctld and each static node munged and
  slurmd (cloud_slurm_hosts.start_cluster, partition = the first queue's
  name), each node named as ParallelCluster names static nodes,
  `<queue>-st-<compute resource>-<N>`, with its features
  `static,<instance type>,<compute resource>[,efa]` ("Slurm guide for
  multiple queue mode",
  https://docs.aws.amazon.com/parallelcluster/latest/ug/multiple-queue-mode-slurm-user-guide-v3.html),
  and the hook returns once `sinfo` on the head shows every node
  idle: the stack's wait condition completes after that, as the cookbook
  signals it after Slurm is up.

A cluster without static nodes gets none: no Slurm is started (Slurm
needs a node; dynamic nodes, launched on demand by slurm's resume
program on AWS, are cloud_pcluster_power.py's). clustermgtd's
replacement of unhealthy static nodes is cloud_pcluster_static.py's.
Unset FLOW_LOCAL_HOSTS: nothing here runs.
"""

import yaml
from moto.ec2.models import ec2_backends
from moto.s3.models import s3_backends

import cloud_pcluster_head_node
import cloud_slurm_hosts


def _config(account_id, cluster):
    """The newest cluster configuration pcluster stored for `cluster`."""
    backend = s3_backends[account_id]["aws"]
    found = []
    for bucket in backend.buckets.values():
        if not bucket.name.startswith("parallelcluster-"):
            continue
        for key in bucket.keys.values():
            name = getattr(key, "name", "")
            if f"/clusters/{cluster}-" in f"/{name}" and name.endswith("/configs/cluster-config.yaml"):
                found.append((key.last_modified, key.value))
    if not found:
        return None
    return yaml.safe_load(max(found, key=lambda f: f[0])[1])


def _template(ec2, cluster, queue, resource):
    """The launch template whose instances are (cluster, queue, resource)'s."""
    wanted = {
        "parallelcluster:cluster-name": cluster,
        "parallelcluster:queue-name": queue,
        "parallelcluster:compute-resource-name": resource,
    }
    for template in ec2.launch_templates.values():
        data = template.latest_version().data
        for spec in data.get("TagSpecifications", []):
            if spec.get("ResourceType") != "instance":
                continue
            tags = {t["Key"]: t["Value"] for t in spec.get("Tags", [])}
            if all(tags.get(k) == v for k, v in wanted.items()):
                return template
    return None


def node_features(resource):
    """The Feature= list ParallelCluster gives a compute resource's static
    nodes: static, the instance type, the compute resource, efa where EFA
    is enabled."""
    features = ["static", resource.get("InstanceType") or "c5.large", resource["Name"]]
    if (resource.get("Efa") or {}).get("Enabled"):
        features.append("efa")
    return ",".join(features)


def launch(ec2, cluster, queue, resource, subnet, count):
    """COUNT instances of compute resource RESOURCE (its configuration) of
    QUEUE, from its launch template, tagged as ParallelCluster tags them."""
    template = _template(ec2, cluster, queue, resource["Name"])
    if template is None:
        raise RuntimeError("no launch template for %s/%s/%s" % (cluster, queue, resource["Name"]))
    reservation = ec2.run_instances(
        image_id=template.latest_version().image_id,
        count=count,
        user_data=None,
        security_group_names=[],
        instance_type=resource.get("InstanceType") or "c5.large",
        is_instance_type_default=False,
        subnet_id=subnet,
        key_name=template.latest_version().data.get("KeyName"),
        # Instance-store devices (VirtualName) are no EBS volumes; moto
        # takes the template's as EBS, so the template's EBS devices are
        # given here instead of the template.
        block_device_mappings=[
            b for b in template.latest_version().data.get("BlockDeviceMappings", []) if "Ebs" in b
        ],
    )
    for instance in reservation.instances:
        instance.add_tags(
            {
                "parallelcluster:cluster-name": cluster,
                "parallelcluster:node-type": "Compute",
                "parallelcluster:queue-name": queue,
                "parallelcluster:compute-resource-name": resource["Name"],
            }
        )
    return reservation.instances


def static_nodes(config):
    """[(node name, queue, compute resource's configuration, subnet)] of
    every static node: MinCount of each compute resource, named
    `<queue>-st-<compute resource>-<N>` as ParallelCluster names them."""
    out = []
    for queue in (config.get("Scheduling") or {}).get("SlurmQueues") or []:
        subnet = ((queue.get("Networking") or {}).get("SubnetIds") or [None])[0]
        for resource in queue.get("ComputeResources") or []:
            for n in range(1, int(resource.get("MinCount") or 0) + 1):
                out.append(("%s-st-%s-%d" % (queue["Name"], resource["Name"], n), queue["Name"],
                            resource, subnet))
    return out


def launch_static_nodes(account_id, region_name, cluster):
    """clustermgtd's static nodes: [(node name, instance id, features)],
    and the first queue."""
    config = _config(account_id, cluster) or {}
    ec2 = ec2_backends[account_id][region_name]
    queues = (config.get("Scheduling") or {}).get("SlurmQueues") or []
    first = queues[0]["Name"] if queues else None
    nodes = []
    for name, queue, resource, subnet in static_nodes(config):
        (instance,) = launch(ec2, cluster, queue, resource, subnet, 1)
        nodes.append((name, instance.id, node_features(resource)))
    return nodes, first


def _on_head_node(account_id, region_name, cluster, head_id):
    nodes, queue = launch_static_nodes(account_id, region_name, cluster)
    if nodes:
        cloud_slurm_hosts.start_cluster(
            cluster,
            head_id,
            [n[1] for n in nodes],
            partition=queue,
            names=[n[0] for n in nodes],
            features={n[0]: n[2] for n in nodes},
            # ParallelCluster's slurm.conf: "set ReturnToService=1 in
            # scheduler config" (its changelog, 2.3.1; kept since): a node
            # set DOWN stays DOWN until it is resumed.
            return_to_service=1,
        )


def install():
    if cloud_slurm_hosts.enabled():
        cloud_pcluster_head_node.HEAD_NODE_HOOKS.append(_on_head_node)

