"""A CloudFormation stack update that changes an AWS::EC2::Instance's
image (or another property whose change needs a new instance) replaces
the instance, for the local cloud.

moto 5.2.5 has no update for AWS::EC2::Instance: a stack update whose
parameters change an instance's ImageId leaves the old instance running
and the resource without a physical id (its outputs break). And its change
sets leave parameters out: a change set whose template is the stack's own
but whose parameters differ lists no changes (CREATE_COMPLETE with none),
so a client that reads it as "nothing to do" never executes it.

What AWS does for the change set (CreateChangeSet,
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html;
"Update CloudFormation stacks using change sets",
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-changesets.html):
each resource whose properties would change, through the template or
through a parameter it refers to, is a `Modify` change. Here the change
set's diff is moto's own diff of resources with the new parameters, the
same one its execution (ResourceMap.update) already uses; a resource of
a type moto has no update for is kept as it was (as when the change set
listed nothing), not recorded as None. Executing a change set also
evaluates the stack's outputs and keeps its parameters anew, as moto's
UpdateStack does (moto kept the outputs of the stack's creation: a
replaced instance's Ref and GetAtt went on naming the old one).

What AWS does ("AWS::EC2::Instance",
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-ec2-instance.html,
each property's "Update requires"): a change of ImageId, KeyName,
SubnetId, AvailabilityZone, PrivateIpAddress or SecurityGroups requires
replacement. CloudFormation makes the new instance first, points the
resource (Ref, Fn::GetAtt) at it, and deletes the old one ("Update
behaviors of stack resources", Replacement,
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html;
the old one goes in the update's cleanup phase, here at once).

Here, for ImageId, KeyName, SubnetId and PrivateIpAddress (the ones
moto's create reads): the new instance is launched as a stack create launches one, with
the stack's tags (aws:cloudformation:*) of the old one, and the old one is
terminated (under scripts/local-hosts, its host goes, the new one is a
host launched from the new image). Updates of other properties
(InstanceType, UserData, Tags, AvailabilityZone, SecurityGroups) are not
modelled: the instance is kept as it is.
"""

import moto.cloudformation.parsing as parsing
from moto.cloudformation.models import Change, ChangeSet
from moto.ec2.models.instances import Instance

# The properties whose change needs a new instance, and the instance's
# attribute that holds each.
REPLACING = {
    "ImageId": "image_id",
    "KeyName": "key_name",
    "SubnetId": "subnet_id",
    "PrivateIpAddress": "private_ip",
}


def _needs_replacement(instance, properties):
    for prop, attribute in REPLACING.items():
        wanted = properties.get(prop)
        if wanted is not None and str(wanted) != str(getattr(instance, attribute, None)):
            return True
    return False


@classmethod
def _update_from_cloudformation_json(
    cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
):
    properties = cloudformation_json.get("Properties", {})
    if not _needs_replacement(original_resource, properties):
        return original_resource
    new = cls.create_from_cloudformation_json(
        new_resource_name, cloudformation_json, account_id, region_name
    )
    for tag in original_resource.get_tags():
        if tag["key"].startswith("aws:cloudformation:"):
            new.add_tag(tag["key"], tag["value"])
    original_resource.terminate()
    return new


def _diff_with_parameters(self):
    resource_map = self.stack.resource_map
    by_action = resource_map.build_resource_diff(self.template_dict, self.parameters)
    changes = []
    for action, names in by_action.items():
        for name in names:
            resources = (
                resource_map._resource_json_map
                if action == "Remove"
                else self.template_dict["Resources"]
            )
            changes.append(Change(action, name, resources[name]["Type"]))
    return changes


_parse_and_update_resource = parsing.parse_and_update_resource


def _update_or_keep(logical_id, resource_json, resources_map, account_id, region_name):
    """moto's update of one resource; a type moto cannot update keeps its
    resource as it was (moto would record None, and the stack's Ref and
    Fn::GetAtt of it would break)."""
    updated = _parse_and_update_resource(
        logical_id, resource_json, resources_map, account_id, region_name
    )
    return resources_map[logical_id] if updated is None else updated


_apply = ChangeSet.apply


def _apply_and_evaluate_outputs(self):
    _apply(self)
    self.stack.output_map = self.stack._create_output_map()
    if self.parameters:
        self.stack.parameters = self.parameters


def install():
    """Gives moto's AWS::EC2::Instance a CloudFormation update, and its
    change sets the resources a parameter change modifies."""
    Instance.update_from_cloudformation_json = _update_from_cloudformation_json
    ChangeSet.diff = _diff_with_parameters
    ChangeSet.apply = _apply_and_evaluate_outputs
    parsing.parse_and_update_resource = _update_or_keep
