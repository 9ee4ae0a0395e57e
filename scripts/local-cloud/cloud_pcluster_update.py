"""Updating a ParallelCluster stack as CloudFormation updates one: moto
5.2.5's UpdateStack loses every modified resource whose type it has no
update for, among them the cluster template's head node
(AWS::EC2::Instance, whose template changes with each cluster update).

moto stores `None` for such a resource, so each `Ref` to it resolves to
nothing from then on: the head node's alarms (dimension `InstanceId = Ref
HeadNode`) then fail with KeyError 'Value' and UpdateStack answers HTTP
500. Whether it hit depended on the order moto took the modified resources
in (a set, so the process's hash seed): an alarm taken before the head
node passed, one after it failed. That is why `pcluster update-cluster`
run by hand sometimes completed and inside flow's apply failed.

Here, as CloudFormation does
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html):

- AWS::EC2::Instance is updated in place, keeping its id, unless a property
  whose update needs replacement changed
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-instance.html:
  ImageId, KeyName, SubnetId, AvailabilityZone and the launch template's id
  are "Update requires: Replacement"; InstanceType and UserData are
  updated with some interruption, the instance kept). A replaced instance
  is terminated after the new one is made, as CloudFormation's cleanup
  phase does.
- any other resource moto cannot update keeps what it was (an update "with
  no interruption": the physical resource stays), instead of vanishing
  from the stack.
"""

import moto.cloudformation.parsing as parsing
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import Instance


def _tag(instance, key):
    for tag in instance.get_tags():
        if tag.get("key") == key:
            return tag.get("value")
    return None


def _replaces(instance, properties):
    """The properties that changed and need a new instance in place of `instance`."""
    template = properties.get("LaunchTemplate") or {}
    wanted = {
        "ImageId": (properties.get("ImageId"), instance.image_id),
        "KeyName": (properties.get("KeyName"), instance.key_name),
        "SubnetId": (properties.get("SubnetId"), instance.subnet_id),
        "AvailabilityZone": (
            properties.get("AvailabilityZone"),
            getattr(instance.placement, "zone", None),
        ),
        "LaunchTemplate": (
            template.get("LaunchTemplateId"),
            _tag(instance, "aws:ec2launchtemplate:id"),
        ),
    }
    return [k for k, (new, old) in wanted.items() if new and old and str(new) != str(old)]


def _update_instance(
    cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
):
    properties = cloudformation_json.get("Properties", {})
    if _replaces(original_resource, properties):
        new = cls.create_from_cloudformation_json(
            new_resource_name, cloudformation_json, account_id, region_name
        )
        ec2_backends[account_id][region_name].terminate_instances([original_resource.id])
        return new
    if properties.get("InstanceType"):
        original_resource.instance_type = properties["InstanceType"]
    if properties.get("UserData"):
        original_resource.user_data = [properties["UserData"]]
    for tag in properties.get("Tags", []):
        original_resource.add_tag(tag["Key"], tag["Value"])
    return original_resource


def install():
    Instance.update_from_cloudformation_json = classmethod(_update_instance)
    original = parsing.parse_and_update_resource

    def parse_and_update_resource(logical_id, resource_json, resources_map, account_id, region_name):
        updated = original(logical_id, resource_json, resources_map, account_id, region_name)
        if updated is None:
            return resources_map._parsed_resources.get(logical_id)
        return updated

    parsing.parse_and_update_resource = parse_and_update_resource
