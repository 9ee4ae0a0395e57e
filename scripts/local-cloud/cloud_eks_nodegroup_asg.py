"""The Auto Scaling group behind each EKS managed node group, and its
instances, which moto 5.2.5 names but never makes.

On AWS a managed node group is an EC2 Auto Scaling group that EKS makes
and owns: "Every managed node is provisioned as part of an Amazon EC2 Auto
Scaling group that's managed for you by Amazon EKS" and "Amazon EKS tags
managed node group resources so that they are configured to use the
Kubernetes Cluster Autoscaler"
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html).
DescribeNodegroup names the group under `resources.autoScalingGroups`
(https://docs.aws.amazon.com/eks/latest/APIReference/API_NodegroupResources.html).
moto 5.2.5 answers with a made-up name (`eks-UUID`) and makes neither the
group nor an instance, so nothing can find a node's instance or its group.

Here CreateNodegroup also makes, in moto's own Auto Scaling and EC2:

- a launch template `eks-UUID` with the group's first instance type (and an
  image moto knows), as EKS makes one when the request names none;
- the Auto Scaling group, named as EKS names it (`eks-NODEGROUP-UUID`, the
  name DescribeNodegroup then gives), with the node group's min, max and
  desired sizes, in its subnets (where EC2 knows them; the zone of the
  region otherwise, for node groups made on made-up subnet ids), tagged
  `eks:cluster-name`, `eks:nodegroup-name`,
  `k8s.io/cluster-autoscaler/enabled`, `k8s.io/cluster-autoscaler/CLUSTER`
  and `kubernetes.io/cluster/CLUSTER` and propagated to its instances;
- so its instances, which moto's Auto Scaling launches carrying the tag
  `aws:autoscaling:groupName` = the group's name, as Amazon EC2 Auto
  Scaling tags every instance it launches
  (https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-tagging.html).

UpdateNodegroupConfig's scaling sets the group's sizes; DeleteNodegroup
deletes the group (terminating its instances) and its launch template, as
EKS deletes what it made for the node group.

TerminateInstanceInAutoScalingGroup is moto's own, and already AWS's
model: with ShouldDecrementDesiredCapacity=false the instance is
terminated and the group, still wanting as many, launches another in its
place; with true the desired count drops by one and nothing replaces it
(https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_TerminateInstanceInAutoScalingGroup.html).
moto does it at once, within the call; AWS terminates and replaces within
minutes. What moto cannot play is the kubelet: an instance becomes a
Kubernetes Node (its name the instance's private DNS name, `providerID`
`aws:///ZONE/INSTANCE-ID`) only in the tests, whose kube driver registers
one for each running instance of a cluster's node groups and removes the
Node of an instance that is gone, as the AWS cloud controller manager does
(tests/support/kube/kubelets.rs).
"""

import sys

from moto.autoscaling.models import autoscaling_backends
from moto.ec2.models import ec2_backends
from moto.eks.models import EKSBackend

# moto's EKS default when the request names no instance type.
DEFAULT_TYPE = "t3.medium"


def _log(message):
    print("cloud_eks_nodegroup_asg: %s" % message, file=sys.stderr)


def _subnets_known(ec2, subnet_ids):
    known = []
    for sid in subnet_ids or []:
        try:
            ec2.get_subnet(sid)
            known.append(sid)
        except Exception:  # noqa: BLE001 - an id EC2 does not know
            pass
    return known


def _image(ec2):
    """An image moto knows (the node group's AMI type has no id here)."""
    for image_id in sorted(ec2.amis):
        return image_id
    return "ami-12c6146b"


def _make_group(backend, ng):
    account, region = backend.account_id, backend.region_name
    ec2 = ec2_backends[account][region]
    scaling = autoscaling_backends[account][region]
    name = "eks-%s-%s" % (ng.nodegroup_name, ng.uuid)
    ng.resources["autoScalingGroups"] = [{"name": name}]
    instance_type = (ng.instance_types or [DEFAULT_TYPE])[0]
    template = ec2.create_launch_template(
        "eks-" + ng.uuid,
        "the launch template of EKS node group %s" % ng.nodegroup_name,
        {"ImageId": _image(ec2), "InstanceType": instance_type},
        {},
    )
    subnets = _subnets_known(ec2, ng.subnets)
    zones = [] if subnets else [region + "a"]
    cluster = ng.cluster_name
    tags = {
        "eks:cluster-name": cluster,
        "eks:nodegroup-name": ng.nodegroup_name,
        "k8s.io/cluster-autoscaler/enabled": "true",
        "k8s.io/cluster-autoscaler/" + cluster: "owned",
        "kubernetes.io/cluster/" + cluster: "owned",
    }
    sizes = ng.scaling_config or {}
    scaling.create_auto_scaling_group(
        name=name,
        availability_zones=zones,
        desired_capacity=sizes.get("desiredSize", 0),
        max_size=sizes.get("maxSize", sizes.get("desiredSize", 0)),
        min_size=sizes.get("minSize", 0),
        launch_config_name=None,
        launch_template={"LaunchTemplateId": template.id, "Version": "$Latest"},
        vpc_zone_identifier=",".join(subnets) or None,
        default_cooldown=None,
        health_check_period=None,
        health_check_type="EC2",
        load_balancers=[],
        target_group_arns=[],
        placement_group=None,
        termination_policies=[],
        tags=[
            {
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
                "Key": k,
                "Value": v,
                "PropagateAtLaunch": True,
            }
            for k, v in tags.items()
        ],
    )


def _group_of(backend, ng):
    scaling = autoscaling_backends[backend.account_id][backend.region_name]
    names = [g.get("name") for g in (ng.resources or {}).get("autoScalingGroups", [])]
    return scaling, [n for n in names if n in scaling.autoscaling_groups]


def install():
    """Makes, resizes and deletes each node group's Auto Scaling group."""
    create = EKSBackend.create_nodegroup
    update = EKSBackend.update_nodegroup_config
    delete = EKSBackend.delete_nodegroup

    def create_nodegroup(self, *args, **kwargs):
        ng = create(self, *args, **kwargs)
        try:
            _make_group(self, ng)
        except Exception as e:  # noqa: BLE001 - the node group stands without it
            _log("no Auto Scaling group for node group %s: %s" % (ng.nodegroup_name, e))
        return ng

    def update_nodegroup_config(self, cluster_name, nodegroup_name, *args, **kwargs):
        answer = update(self, cluster_name, nodegroup_name, *args, **kwargs)
        ng = self.clusters[cluster_name].nodegroups[nodegroup_name]
        scaling, groups = _group_of(self, ng)
        sizes = ng.scaling_config or {}
        for name in groups:
            scaling.update_auto_scaling_group(
                name=name,
                availability_zones=[],
                desired_capacity=sizes.get("desiredSize"),
                max_size=sizes.get("maxSize"),
                min_size=sizes.get("minSize"),
                launch_config_name=None,
                launch_template={},
                vpc_zone_identifier=None,
                health_check_period=None,
                health_check_type=None,
            )
        return answer

    def delete_nodegroup(self, cluster_name, nodegroup_name):
        ng = self.clusters.get(cluster_name)
        ng = ng.nodegroups.get(nodegroup_name) if ng else None
        answer = delete(self, cluster_name, nodegroup_name)
        if ng is not None:
            scaling, groups = _group_of(self, ng)
            for name in groups:
                scaling.delete_auto_scaling_group(name)
            ec2 = ec2_backends[self.account_id][self.region_name]
            if "eks-" + ng.uuid in ec2.launch_template_name_to_ids:
                ec2.delete_launch_template("eks-" + ng.uuid, None)
        return answer

    EKSBackend.create_nodegroup = create_nodegroup
    EKSBackend.update_nodegroup_config = update_nodegroup_config
    EKSBackend.delete_nodegroup = delete_nodegroup
