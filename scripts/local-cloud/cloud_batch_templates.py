"""AWS Batch as CloudFormation and Batch's API make it from a published
template, where moto 5.2.5 differs from AWS:

- `AWS::Batch::JobDefinition`'s `Type` is honoured: moto's CloudFormation
  registers every job definition as `container`, so a `multinode` one
  (`NodeProperties`, as the awsome-distributed-training Batch templates
  declare theirs) was refused for lacking `ContainerProperties`. AWS:
  "Type: The type of job definition ... If the job is run on Fargate
  resources, then multinode isn't supported" with `container`,
  `multinode` (and `NodeProperties` for it)
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-batch-jobdefinition.html);
  Batch's API: containerProperties "can't be used in addition to"
  nodeProperties
  (https://docs.aws.amazon.com/batch/latest/APIReference/API_RegisterJobDefinition.html).
- DescribeJobDefinitions shows a multinode definition's `nodeProperties`
  (moto's answer had none), as JobDefinition in
  https://docs.aws.amazon.com/batch/latest/APIReference/API_DescribeJobDefinitions.html
  has them.
- A managed EC2 compute environment's `securityGroupIds` may be left out
  when its launch template gives the groups: "One or more security groups
  must be specified, either in securityGroupIds or using a launch template
  referenced in launchTemplate ... If security groups are specified using
  both securityGroupIds and launchTemplate, the values in securityGroupIds
  are used" (https://docs.aws.amazon.com/batch/latest/APIReference/API_ComputeResource.html).
  moto required `securityGroupIds` (a KeyError without it). Here the
  instances Batch launches get the launch template's groups (its
  `SecurityGroupIds`, or each network interface's `Groups`, as an EFA
  template sets them); neither given is refused as AWS refuses it, and
  DescribeComputeEnvironments shows only what was asked for.
"""

from moto.batch.exceptions import ClientException
from moto.batch.models import BatchBackend, JobDefinition
from moto.cloudformation.exceptions import ValidationError
from moto.ec2.models import ec2_backends


def _template_groups(account_id, region_name, template):
    """The security groups of launch template `template` (its
    `launchTemplateId` or `launchTemplateName`, and `version`), or []."""
    ec2 = ec2_backends[account_id][region_name]
    found = None
    for lt in ec2.launch_templates.values():
        if lt.id == template.get("launchTemplateId") or lt.name == template.get("launchTemplateName"):
            found = lt
            break
    if found is None:
        return []
    chosen = found.get_version(template.get("version") or "$Default")
    data = chosen.data or {}
    groups = list(data.get("SecurityGroupIds") or [])
    for interface in data.get("NetworkInterfaces") or []:
        for group in interface.get("Groups") or []:
            if group not in groups:
                groups.append(group)
    return groups


# Maps whose keys are the user's, not the API's: kept as written.
_USER_MAPS = ("options", "labels")


def _api_keys(value):
    """A template's properties as Batch's API spells them: every key's first
    letter lower-cased, at every depth (CloudFormation's `NodeProperties`
    → `nodeProperties`, `NodeRangeProperties` → `nodeRangeProperties`,
    `TargetNodes` → `targetNodes` ...), except inside user maps
    (`LogConfiguration.Options`, `DockerLabels`)."""
    if isinstance(value, list):
        return [_api_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, inner in value.items():
        api = key[:1].lower() + key[1:]
        out[api] = inner if api in _USER_MAPS else _api_keys(inner)
    return out


def install():
    job_definition_from_template = JobDefinition.create_from_cloudformation_json.__func__
    create_environment = BatchBackend.create_compute_environment
    describe = JobDefinition.describe

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        properties = cloudformation_json["Properties"]
        if properties.get("Type") != "multinode":
            return job_definition_from_template(
                cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
            )
        from moto.batch.models import batch_backends

        if "ContainerProperties" in properties or "EksProperties" in properties:
            # Refused at CreateStack, in CloudFormation's own error (AWS
            # fails the resource a moment later, with Batch's words).
            raise ValidationError(
                message="%s: containerProperties or eksProperties can't be used in addition "
                "to nodeProperties for a multinode job definition" % resource_name
            )
        backend = batch_backends[account_id][region_name]
        return backend.register_job_definition(
            def_name=resource_name,
            parameters=dict(properties.get("Parameters", {})),
            _type="multinode",
            tags=dict(properties.get("Tags", {})),
            retry_strategy=_api_keys(properties.get("RetryStrategy", {})),
            container_properties=None,
            node_properties=_api_keys(properties["NodeProperties"]),
            eks_properties=None,
            timeout=_api_keys(properties.get("Timeout", {})),
            platform_capabilities=None,
            propagate_tags=properties.get("PropagateTags"),
        )

    def create_compute_environment(self, compute_environment_name, _type, state, compute_resources,
                                   service_role, tags=None):
        given = compute_resources is not None and "securityGroupIds" in compute_resources
        if compute_resources is not None and not given and "FARGATE" not in compute_resources.get("type", ""):
            groups = _template_groups(
                self.account_id, self.region_name, compute_resources.get("launchTemplate") or {}
            )
            if not groups:
                raise ClientException(
                    "Error executing request, Exception : One or more security groups must be "
                    "specified, either in securityGroupIds or using a launch template referenced "
                    "in launchTemplate."
                )
            compute_resources = dict(compute_resources, securityGroupIds=groups)
        made = create_environment(self, compute_environment_name, _type, state, compute_resources,
                                  service_role, tags)
        if compute_resources is not None and not given and made.compute_resources is not None:
            # The groups were the launch template's: the environment keeps
            # them for its instances (cloud_batch_mnp.py reads them) but
            # describes only what it was asked for.
            made._flow_template_groups = made.compute_resources.pop("securityGroupIds", None)
        return made

    def describe_definition(self):
        out = describe(self)
        if self.node_properties is not None:
            out["nodeProperties"] = self.node_properties
        return out

    JobDefinition.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
    JobDefinition.describe = describe_definition
    BatchBackend.create_compute_environment = create_compute_environment
