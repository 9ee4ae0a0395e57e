"""A ParallelCluster head node, as far as AWS's APIs see one, for the local
cloud. On AWS the head node's bootstrap (ParallelCluster's cookbook) and
its daemons do three things the CLI then reads back through AWS:

- at boot it writes the compute fleet's status, RUNNING, into the
  cluster's DynamoDB table `parallelcluster-CLUSTER` (item `Id =
  COMPUTE_FLEET`, `Data = {status, lastStatusUpdatedTime}`, the JSON form
  aws-parallelcluster 3.16.1 reads in `models/compute_fleet_status_manager.py`),
  then signals the stack's wait condition (AWS::CloudFormation::WaitCondition,
  https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-waitcondition.html:
  the stack waits for Count success signals on the handle; the resource is
  complete when they came);
- clusterstatusmgtd carries out `pcluster update-compute-fleet`: STOP_REQUESTED
  → STOPPING (the compute nodes are terminated) → STOPPED, and
  START_REQUESTED → STARTING → RUNNING
  (https://docs.aws.amazon.com/parallelcluster/latest/ug/pcluster.update-compute-fleet-v3.html,
  "STOP_REQUESTED, STOPPING, STOPPED ... START_REQUESTED, STARTING, RUNNING").

moto has no head node: its CloudFormation skips wait conditions and their
handles ("not supported"; DescribeStackResources then lists them without
a logical id, which pcluster's update-cluster fails on) and nothing moves
the fleet status on. Here:

- a wait condition handle's `Ref` is a presigned-URL-shaped address of the
  stack and the resource (AWS::CloudFormation::WaitConditionHandle,
  https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-waitconditionhandle.html);

- the wait condition of a stack that has a `parallelcluster-STACK` table is
  complete once the head node "booted": the status RUNNING is written
  first, as the cookbook writes it at first boot, then every function in
  `HEAD_NODE_HOOKS` is called with (account, region, cluster name, head
  node instance id). A wait condition made by a stack update (pcluster
  names each update's `HeadNodeWaitCondition` after its time: the head node
  signals it once cfn-hup has applied the update) leaves the status as it
  is (a fleet stopped for the update stays stopped) and calls
  `UPDATE_HOOKS` instead. This is the seam for instances that are hosts: a host
  layer (cloud_hosts.py) that backs the head node appends its own function,
  which starts the host (slurmctld) and returns when it is up. A wait
  condition of any other stack completes at once (moto's behaviour);
- an UpdateItem or PutItem that sets the COMPUTE_FLEET item of a
  `parallelcluster-` table to STOP_REQUESTED or START_REQUESTED is carried
  on by a thread, as clusterstatusmgtd would, one step every
  FLOW_PCLUSTER_FLEET_STEP_S seconds (default 1; clusterstatusmgtd polls
  each minute on AWS): STOPPING, the cluster's compute instances (tag
  `parallelcluster:node-type = Compute`) terminated, STOPPED; or STARTING,
  RUNNING. A status written meanwhile by someone else stops the thread.
  Each status it writes is passed on to every function in `FLEET_HOOKS`
  (account, region, cluster name, status): what else the daemons do at
  that point (cloud_pcluster_fleet.py: Slurm's side of a stop and start).
"""

import datetime
import os
import threading
import time

import moto.cloudformation.parsing as parsing
from moto.core.common_models import CloudFormationModel
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.ec2.models import ec2_backends

FLEET_KEY = "COMPUTE_FLEET"
TABLE_PREFIX = "parallelcluster-"
# Functions (account, region, cluster, head node instance id) run when a
# head node has booted, before the stack's wait condition completes.
HEAD_NODE_HOOKS = []
# The same, run when the head node has applied a stack update (cfn-hup's
# update recipes), before that update's wait condition completes: what
# the update changes on the head node (slurm.conf for new queue sizes).
# Static nodes are not relaunched by an update here.
UPDATE_HOOKS = []
# Functions (account, region, cluster, status) run as clusterstatusmgtd
# writes each fleet status it moves to (STOPPING, STOPPED, STARTING,
# RUNNING), right after writing it.
FLEET_HOOKS = []
_TRANSITIONS = {
    "STOP_REQUESTED": ("STOPPING", "STOPPED"),
    "START_REQUESTED": ("STARTING", "RUNNING"),
}


def _now():
    return str(datetime.datetime.now(tz=datetime.timezone.utc))


def _step_seconds():
    return float(os.environ.get("FLOW_PCLUSTER_FLEET_STEP_S", "1"))


def fleet_status(account_id, region_name, cluster):
    """The COMPUTE_FLEET status in the cluster's table, or None."""
    backend = dynamodb_backends[account_id][region_name]
    try:
        item = backend.get_item(TABLE_PREFIX + cluster, {"Id": {"S": FLEET_KEY}})
    except Exception:
        return None
    if item is None:
        return None
    data = item.to_json()["Attributes"].get("Data", {}).get("M", {})
    return data.get("status", {}).get("S")


def _write_status(account_id, region_name, cluster, status):
    dynamodb_backends[account_id][region_name].put_item(
        TABLE_PREFIX + cluster,
        {
            "Id": {"S": FLEET_KEY},
            "Data": {
                "M": {
                    "status": {"S": status},
                    "lastStatusUpdatedTime": {"S": _now()},
                }
            },
        },
    )


def _compute_instances(account_id, region_name, cluster):
    ec2 = ec2_backends[account_id][region_name]
    wanted = {"parallelcluster:cluster-name": cluster, "parallelcluster:node-type": "Compute"}
    return [
        i.id
        for reservation in ec2.reservations.values()
        for i in reservation.instances
        if i.state in ("pending", "running", "stopping", "stopped")
        and all(
            any(t["key"] == k and t["value"] == v for t in i.get_tags()) for k, v in wanted.items()
        )
    ]


def _carry_on(account_id, region_name, cluster, requested):
    """clusterstatusmgtd: from REQUESTED through its in-progress status to
    its final one."""
    in_progress, final = _TRANSITIONS[requested]
    for current, following in ((requested, in_progress), (in_progress, final)):
        time.sleep(_step_seconds())
        if fleet_status(account_id, region_name, cluster) != current:
            return  # someone else moved it on
        if following == "STOPPED":
            ids = _compute_instances(account_id, region_name, cluster)
            if ids:
                ec2_backends[account_id][region_name].terminate_instances(ids)
        _write_status(account_id, region_name, cluster, following)
        for hook in list(FLEET_HOOKS):
            try:
                hook(account_id, region_name, cluster, following)
            except Exception as e:  # the status moves on, as the daemons' do
                print("fleet hook at %s of %s: %s" % (following, cluster, e), flush=True)


def _watch(name):
    """Wraps DynamoDB's `name` (update_item, put_item) so that a fleet
    status request is carried on."""
    original = getattr(DynamoDBBackend, name)

    def wrapped(self, table_name, *args, **kwargs):
        result = original(self, table_name, *args, **kwargs)
        if table_name.startswith(TABLE_PREFIX):
            cluster = table_name[len(TABLE_PREFIX):]
            status = fleet_status(self.account_id, self.region_name, cluster)
            if status in _TRANSITIONS:
                threading.Thread(
                    target=_carry_on,
                    args=(self.account_id, self.region_name, cluster, status),
                    daemon=True,
                ).start()
        return result

    setattr(DynamoDBBackend, name, wrapped)


class WaitCondition(CloudFormationModel):
    """AWS::CloudFormation::WaitCondition: complete once the head node of
    a ParallelCluster stack booted; at once in any other stack."""

    __module__ = "moto.cloudformation.models"

    def __init__(self, name):
        self.name = name

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudFormation::WaitCondition"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr == "Data"

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "Data":
            return "{}"
        raise KeyError(attribute_name)

    @property
    def physical_resource_id(self):
        return self.name

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        stack_id = kwargs.get("StackId", "")
        cluster = stack_id.split("/")[1] if stack_id.count("/") >= 2 else ""
        if cluster:
            _boot_head_node(account_id, region_name, stack_id, cluster)
        return cls(resource_name)

    def delete(self, account_id, region_name):
        pass


class WaitConditionHandle(CloudFormationModel):
    """AWS::CloudFormation::WaitConditionHandle: `Ref` is the presigned URL
    the head node signals (here a URL of the stack's own, never called)."""

    __module__ = "moto.cloudformation.models"

    def __init__(self, url):
        self.url = url

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudFormation::WaitConditionHandle"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @property
    def physical_resource_id(self):
        return self.url

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        stack_id = kwargs.get("StackId", "")
        logical = kwargs.get("LogicalId", resource_name)
        return cls(
            f"https://cloudformation-waitcondition-{region_name}.s3.amazonaws.com/"
            f"{stack_id.replace(':', '%3A').replace('/', '%7C')}/{logical}"
        )

    def delete(self, account_id, region_name):
        pass


def _boot_head_node(account_id, region_name, stack_id, cluster):
    """The head node's boot, if the stack is a cluster's: its fleet table
    (made first if CloudFormation has not yet), status RUNNING, the hooks."""
    from moto.cloudformation.models import cloudformation_backends

    stack = cloudformation_backends[account_id][region_name].stacks.get(stack_id)
    if stack is None:
        return False
    resources = stack.resource_map
    table_id = next(
        (
            logical
            for logical, body in resources._resource_json_map.items()
            if body.get("Type") == "AWS::DynamoDB::Table"
            and body.get("Properties", {}).get("TableName") == TABLE_PREFIX + cluster
        ),
        None,
    )
    head_id = next(
        (
            logical
            for logical, body in resources._resource_json_map.items()
            if body.get("Type") == "AWS::EC2::Instance" and logical == "HeadNode"
        ),
        None,
    )
    if table_id is None:
        return False
    resources[table_id]  # made now if not yet
    head = resources[head_id] if head_id else None
    # The cookbook writes RUNNING at the head node's first boot. A stack
    # update makes a new wait condition too (pcluster names each update's
    # after its time), which the head node signals once cfn-hup has applied
    # the update: the fleet keeps the status it has (a fleet stopped for
    # the update stays STOPPED until someone starts it).
    first_boot = fleet_status(account_id, region_name, cluster) is None
    if first_boot:
        _write_status(account_id, region_name, cluster, "RUNNING")
    for hook in list(HEAD_NODE_HOOKS if first_boot else UPDATE_HOOKS):
        hook(account_id, region_name, cluster, getattr(head, "id", None))
    return True


def install():
    """Wait conditions are modelled here, not skipped; fleet status
    requests are carried on."""
    for modelled in ("AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle"):
        if modelled in parsing.NULL_MODELS:
            parsing.NULL_MODELS.remove(modelled)
    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    _watch("update_item")
    _watch("put_item")
