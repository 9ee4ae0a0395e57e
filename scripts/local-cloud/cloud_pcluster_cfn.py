"""What ParallelCluster's cluster template needs from CloudFormation, which
moto 5.2.5 lacks (the template `pcluster create-cluster` 3.16.1 generates
with the AWS CDK and hands to CreateStack; moto logs "No Moto CloudFormation
support for ..." for each type below and refuses the template at its first
`Fn::GetAtt` on an alarm):

- AWS::CloudWatch::Alarm: a metric alarm made with CloudWatch's
  PutMetricAlarm in moto's CloudWatch, so DescribeAlarms lists it; `Ref` is
  its name, `Fn::GetAtt ... Arn` its ARN
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-alarm.html);
  deleting the stack deletes the alarm (DeleteAlarms).
- AWS::CloudWatch::CompositeAlarm: PutCompositeAlarm with its AlarmRule;
  `Ref` its name, `Arn` its ARN
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-compositealarm.html).
- AWS::Logs::MetricFilter: PutMetricFilter on its log group
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-logs-metricfilter.html).
- AWS::CloudFormation::CustomResource (and `Custom::` types whose
  ServiceToken is one of ParallelCluster's own cleanup functions): moto
  would invoke the Lambda function in Docker. ParallelCluster's template
  declares three, all served by its function `cleanup_resources.handler`
  (aws-parallelcluster 3.16.1, `resources/custom_resources/
  custom_resources_code/cleanup_resources.py`, uploaded by pcluster as the
  cluster's `custom_resources/artifacts.zip`). They are answered here as
  that function answers, per the custom resource request protocol
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requests.html):
  Create and Update do nothing and succeed; Delete does the resource's
  `Action`:
  - DELETE_S3_ARTIFACTS: every object and object version under
    `ArtifactS3RootDirectory/` in `ResourcesS3Bucket` is deleted (a bucket
    that is gone is fine);
  - TERMINATE_EC2_INSTANCES: every instance tagged
    `parallelcluster:cluster-name = StackName` in pending, running,
    stopping or stopped is terminated (the function's 10 s and 30 s sleeps,
    waits for EC2 on AWS, are not taken: moto's terminate is at once);
  - DELETE_DNS_RECORDS: every A record ending in `ClusterDNSDomain` in the
    hosted zone `ClusterHostedZone` is deleted; an empty zone id fails, as
    the function raises.
  A custom resource's physical id is made as crhelper makes it
  (`STACKNAME_LOGICALID_` + 8 random characters). A ServiceToken that is
  not one of the cleanup functions (no `Action` the function knows) fails
  the resource with the function's own message, "Unsupported action X",
  on delete, and succeeds on create, as the function does.

- `Fn::GetAtt NESTED.Outputs.NAME` on an AWS::CloudFormation::Stack (the
  template reads its queues' launch templates so): the nested stack's
  output NAME, as the Stack resource's return values document
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-stack.html).
- AWS::EC2::Instance with a `LaunchTemplate` (pcluster's head node: its
  image, type, key, profile and network interface are the launch
  template's): moto requires `ImageId`; here the instance is run from the
  template as RunInstances runs one, what the instance's own properties
  give overriding the template's
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-instance.html,
  LaunchTemplate), its network interfaces (an existing ENI's id included)
  attached.
- AWS::EC2::SecurityGroupEgress (the compute group's egress rules): the
  rule is added with AuthorizeSecurityGroupEgress (a rule the group holds
  already, such as a VPC group's default allow-all, is left as it is) and
  revoked when the stack is deleted
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-securitygroupegress.html);
  moto skips the type, and DescribeStackResources then lists the rule
  without a logical id, which pcluster's update-cluster fails on.
- AWS::EC2::PlacementGroup (the EFA queue's cluster placement group, in the
  queues' nested stack): `Ref` is its name, generated from the stack's name
  and the logical id when GroupName is not given
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-placementgroup.html);
  moto's EC2 has no placement groups to describe, so it is a name only.

The head node's wait condition (AWS::CloudFormation::WaitCondition) stays
moto's: complete at once, as if the head node had signalled success. That
is the seam for hosts: an instance that a host backs (cloud_hosts.py)
signals when its own bootstrap ends.
"""

import random
import string

from moto.cloudwatch.models import cloudwatch_backends
from moto.core.common_models import CloudFormationModel
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import Instance
from moto.logs.models import logs_backends
from moto.route53.models import route53_backends
from moto.s3.models import s3_backends

CLUSTER_TAG = "parallelcluster:cluster-name"


def _alarm_arn(account_id, region_name, name):
    return f"arn:aws:cloudwatch:{region_name}:{account_id}:alarm:{name}"


def _dimensions(properties):
    return [
        {"Name": d["Name"], "Value": str(d["Value"])}
        for d in properties.get("Dimensions", [])
    ]


class CloudWatchAlarm(CloudFormationModel):
    """AWS::CloudWatch::Alarm and AWS::CloudWatch::CompositeAlarm, made in
    moto's CloudWatch."""

    __module__ = "moto.cloudwatch.models"

    def __init__(self, account_id, region_name, name):
        self.account_id = account_id
        self.region_name = region_name
        self.name = name

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type():
        return "AlarmName"

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "Arn":
            return _alarm_arn(self.account_id, self.region_name, self.name)
        raise KeyError(attribute_name)

    @property
    def physical_resource_id(self):
        return self.name

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        p = cloudformation_json["Properties"]
        name = p.get("AlarmName", resource_name)
        backend = cloudwatch_backends[account_id][region_name]
        backend.put_metric_alarm(
            name=name,
            namespace=p.get("Namespace"),
            metric_name=p.get("MetricName"),
            comparison_operator=p.get("ComparisonOperator"),
            evaluation_periods=int(p.get("EvaluationPeriods", 1)),
            period=int(p.get("Period", 60)),
            threshold=float(p.get("Threshold", 0)),
            statistic=p.get("Statistic"),
            description=p.get("AlarmDescription", ""),
            dimensions=_dimensions(p),
            alarm_actions=p.get("AlarmActions", []),
            datapoints_to_alarm=p.get("DatapointsToAlarm"),
            extended_statistic=p.get("ExtendedStatistic"),
            ok_actions=p.get("OKActions", []),
            insufficient_data_actions=p.get("InsufficientDataActions", []),
            unit=p.get("Unit"),
            actions_enabled=p.get("ActionsEnabled", True) not in (False, "false"),
            treat_missing_data=p.get("TreatMissingData"),
            rule=p.get("AlarmRule"),
        )
        return cls(account_id, region_name, name)

    @classmethod
    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        original_resource.delete(account_id, region_name)
        return cls.create_from_cloudformation_json(
            new_resource_name, cloudformation_json, account_id, region_name
        )

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name
    ):
        cloudwatch_backends[account_id][region_name].delete_alarms([resource_name])

    def delete(self, account_id, region_name):
        cloudwatch_backends[account_id][region_name].delete_alarms([self.name])


class CloudWatchCompositeAlarm(CloudWatchAlarm, CloudFormationModel):
    """AWS::CloudWatch::CompositeAlarm: an alarm with an AlarmRule (a direct
    subclass of CloudFormationModel too: moto registers only those)."""

    __module__ = "moto.cloudwatch.models"

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudWatch::CompositeAlarm"


class LogsMetricFilter(CloudFormationModel):
    """AWS::Logs::MetricFilter, put on its log group in moto's Logs."""

    __module__ = "moto.logs.models"

    def __init__(self, name, group):
        self.name = name
        self.group = group

    @staticmethod
    def cloudformation_type():
        return "AWS::Logs::MetricFilter"

    @staticmethod
    def cloudformation_name_type():
        return "FilterName"

    @property
    def physical_resource_id(self):
        return self.name

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        p = cloudformation_json["Properties"]
        name = p.get("FilterName", resource_name)
        transformations = [
            {
                "metricName": t["MetricName"],
                "metricNamespace": t["MetricNamespace"],
                "metricValue": str(t["MetricValue"]),
                **({"unit": t["Unit"]} if "Unit" in t else {}),
                **(
                    {"dimensions": {d["Key"]: d["Value"] for d in t["Dimensions"]}}
                    if "Dimensions" in t
                    else {}
                ),
            }
            for t in p.get("MetricTransformations", [])
        ]
        logs_backends[account_id][region_name].put_metric_filter(
            name, p.get("FilterPattern", ""), p["LogGroupName"], transformations
        )
        return cls(name, p["LogGroupName"])

    def delete(self, account_id, region_name):
        logs_backends[account_id][region_name].delete_metric_filter(self.name, self.group)


def _delete_s3_artifacts(properties, account_id):
    bucket_name = properties["ResourcesS3Bucket"]
    prefix = properties["ArtifactS3RootDirectory"] + "/"
    if bucket_name == "NONE":
        return
    backend = s3_backends[account_id]["aws"]
    bucket = backend.buckets.get(bucket_name)
    if bucket is None:
        return  # "Bucket was probably manually deleted."
    for key in [k for k in list(bucket.keys.keys()) if k.startswith(prefix)]:
        for version in list(bucket.keys.getlist(key)):
            backend.delete_object(bucket_name, key, version_id=version.version_id)


def _terminate_cluster_nodes(properties, account_id, region_name):
    stack_name = properties["StackName"]
    ec2 = ec2_backends[account_id][region_name]
    ids = [
        i.id
        for reservation in ec2.reservations.values()
        for i in reservation.instances
        if i.state in ("pending", "running", "stopping", "stopped")
        and any(
            t["key"] == CLUSTER_TAG and t["value"] == stack_name
            for t in ec2.describe_tags(filters={"resource-id": [i.id]})
        )
    ]
    if ids:
        ec2.terminate_instances(ids)


def _delete_dns_records(properties, account_id):
    zone_id = properties.get("ClusterHostedZone")
    domain = properties.get("ClusterDNSDomain", "")
    if not zone_id:
        raise ValueError("Hosted Zone ID is empty")
    backend = route53_backends[account_id]["aws"]
    zone = backend.get_hosted_zone(zone_id)
    for record in list(zone.rrsets):
        if record.type == "A" and record.name.endswith(domain):
            zone.delete_rrset({"Name": record.name, "Type": record.type})


_ACTIONS = {"DELETE_S3_ARTIFACTS", "TERMINATE_EC2_INSTANCES", "DELETE_DNS_RECORDS"}


class CleanupCustomResource(CloudFormationModel):
    """AWS::CloudFormation::CustomResource served by ParallelCluster's
    cleanup function, answered as the function answers."""

    __module__ = "moto.cloudformation.models"

    def __init__(self, physical_id, properties):
        self.physical_id = physical_id
        self.properties = properties

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudFormation::CustomResource"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.physical_id

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        # crhelper: "{stack_name}_{logical_id}_{8 random characters}".
        stack_name = kwargs.get("StackId", "").split("/")[1:2] or ["stack"]
        suffix = "".join(random.choices(string.ascii_letters + string.digits, k=8))
        physical = f"{stack_name[0]}_{kwargs.get('LogicalId', resource_name)}_{suffix}"
        return cls(physical, dict(cloudformation_json.get("Properties", {})))

    @classmethod
    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        # Update: the function does nothing; the physical id stays.
        original_resource.properties = dict(cloudformation_json.get("Properties", {}))
        return original_resource

    def delete(self, account_id, region_name):
        action = self.properties.get("Action")
        if action == "DELETE_S3_ARTIFACTS":
            _delete_s3_artifacts(self.properties, account_id)
        elif action == "TERMINATE_EC2_INSTANCES":
            _terminate_cluster_nodes(self.properties, account_id, region_name)
        elif action == "DELETE_DNS_RECORDS":
            _delete_dns_records(self.properties, account_id)
        else:
            raise ValueError(f"Unsupported action {action}")


class SecurityGroupEgress(CloudFormationModel):
    """AWS::EC2::SecurityGroupEgress: one egress rule of a group."""

    __module__ = "moto.ec2.models.security_groups"

    def __init__(self, rule_id, args):
        self.rule_id = rule_id
        self.args = args

    @staticmethod
    def cloudformation_type():
        return "AWS::EC2::SecurityGroupEgress"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.rule_id

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        from moto.ec2.exceptions import InvalidPermissionDuplicateError

        p = cloudformation_json["Properties"]
        args = {
            "group_name_or_id": p["GroupId"],
            "ip_protocol": str(p["IpProtocol"]),
            "from_port": p.get("FromPort"),
            "to_port": p.get("ToPort"),
            "ip_ranges": [{"CidrIp": p["CidrIp"]}] if "CidrIp" in p else [],
            "source_groups": [{"GroupId": p["DestinationSecurityGroupId"]}]
            if "DestinationSecurityGroupId" in p
            else [],
        }
        ec2 = ec2_backends[account_id][region_name]
        try:
            rules, _ = ec2.authorize_security_group_egress(**args)
        except InvalidPermissionDuplicateError:
            return cls(f"{p['GroupId']}-{resource_name}", None)
        return cls(rules[0].id if rules else resource_name, args)

    def delete(self, account_id, region_name):
        from moto.ec2.exceptions import InvalidSecurityGroupNotFoundError

        if self.args is None:
            return
        try:
            ec2_backends[account_id][region_name].revoke_security_group_egress(**self.args)
        except InvalidSecurityGroupNotFoundError:
            pass  # the rule went with its group, or the group it names


class PlacementGroup(CloudFormationModel):
    """AWS::EC2::PlacementGroup: its name (moto's EC2 has no placement
    groups)."""

    __module__ = "moto.ec2.models.instances"

    def __init__(self, name, strategy):
        self.name = name
        self.strategy = strategy

    @staticmethod
    def cloudformation_type():
        return "AWS::EC2::PlacementGroup"

    @staticmethod
    def cloudformation_name_type():
        return "GroupName"

    @property
    def physical_resource_id(self):
        return self.name

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        p = cloudformation_json.get("Properties", {})
        return cls(p.get("GroupName", resource_name), p.get("Strategy", "cluster"))

    def delete(self, account_id, region_name):
        pass


_instance_from_json = Instance.create_from_cloudformation_json.__func__


def _instance_from_launch_template(
    cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
):
    """AWS::EC2::Instance: from its LaunchTemplate when it names one and no
    ImageId."""
    properties = cloudformation_json["Properties"]
    template_arg = properties.get("LaunchTemplate")
    if not template_arg or properties.get("ImageId"):
        return _instance_from_json(
            cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
        )
    ec2 = ec2_backends[account_id][region_name]
    template_arg = {k: str(v) for k, v in template_arg.items()}
    data = ec2._get_template_from_args(template_arg).data
    nics = properties.get("NetworkInterfaces") or data.get("NetworkInterfaces") or []
    subnet_id = properties.get("SubnetId") or data.get("SubnetId")
    for nic in nics:
        if not subnet_id and nic.get("NetworkInterfaceId"):
            subnet_id = ec2.get_network_interface(nic["NetworkInterfaceId"]).subnet.id
        subnet_id = subnet_id or nic.get("SubnetId")
    profile = properties.get("IamInstanceProfile") or (data.get("IamInstanceProfile") or {}).get("Name")
    reservation = ec2.run_instances(
        image_id=properties.get("ImageId") or data.get("ImageId"),
        user_data=properties.get("UserData") or data.get("UserData"),
        count=1,
        security_group_names=[],
        instance_type=properties.get("InstanceType") or data.get("InstanceType", "m1.small"),
        is_instance_type_default=False,
        subnet_id=subnet_id,
        key_name=properties.get("KeyName") or data.get("KeyName"),
        nics=[dict(n, DeviceIndex=str(n.get("DeviceIndex", 0))) for n in nics],
        launch_template=template_arg,
        # Instance-store devices (VirtualName) are no EBS volumes.
        block_device_mappings=[
            b
            for b in properties.get("BlockDeviceMappings") or data.get("BlockDeviceMappings", [])
            if "Ebs" in b
        ],
    )
    instance = reservation.instances[0]
    for tag in properties.get("Tags", []):
        instance.add_tag(tag["Key"], tag["Value"])
    if profile:
        ec2.associate_iam_instance_profile(
            instance_id=instance.id, iam_instance_profile_name=profile
        )
    return instance


def _nested_stack_attribute(self, attribute_name):
    """`Outputs.NAME` of a nested stack: its output NAME."""
    if attribute_name.startswith("Outputs."):
        wanted = attribute_name[len("Outputs."):]
        for output in self.output_map.values():
            if output.key == wanted:
                return output.value
    from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

    raise UnformattedGetAttTemplateException()


def install():
    """The classes above register themselves with moto's CloudFormation on
    import (CloudFormationModel's subclasses); moto caches its map of types
    on first use, which is after this."""
    import moto.cloudformation.parsing as parsing
    from moto.cloudformation.models import Stack

    Stack.get_cfn_attribute = _nested_stack_attribute
    Instance.create_from_cloudformation_json = classmethod(_instance_from_launch_template)

    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cache_clear = getattr(cached, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
