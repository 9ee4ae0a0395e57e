"""Change sets that change only a stack's parameters, for the local cloud.

moto 5.2.5 leaves parameters out of a change set: one whose template is
the stack's own but whose parameters differ lists no changes (its status
CREATE_COMPLETE, no Changes), so a client that reads that as "nothing to
do" never executes it: a new AMI id given to a stack of instances made
nothing happen. And executing a change set kept the outputs evaluated at
the stack's creation: a replaced instance's Ref and Fn::GetAtt went on
naming the old one.

What AWS does (CreateChangeSet,
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html;
"Update CloudFormation stacks using change sets",
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-changesets.html):
each resource whose properties would change, through the template or
through a parameter it refers to, is a `Modify` change; once executed,
the stack's outputs are those of its updated resources.

Here: the change set's changes are moto's own diff of resources with the
new parameters (ResourceMap.build_resource_diff, the one its execution
already uses), and executing it evaluates the outputs again and keeps the
parameters, as moto's UpdateStack does. What the update does to each
resource is moto's, with cloud_pcluster_update.py's AWS::EC2::Instance
(a new ImageId replaces the instance, as "Update requires: Replacement"
says).
"""

from moto.cloudformation.models import Change, ChangeSet

_apply = ChangeSet.apply


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


def _apply_and_evaluate_outputs(self):
    _apply(self)
    self.stack.output_map = self.stack._create_output_map()
    if self.parameters:
        self.stack.parameters = self.parameters


def install():
    """Change sets list, and their execution shows, parameter changes."""
    ChangeSet.diff = _diff_with_parameters
    ChangeSet.apply = _apply_and_evaluate_outputs
