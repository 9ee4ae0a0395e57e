"""moto's server (the local AWS API of the tests and the quickstart), with
what its CloudFormation lacks to make and delete VPC stacks as AWS does.
Each gap was reproduced against moto 5.2.5 (scripts/local-cloud/
requirements.txt) before it was filled here; nothing else of moto changes.

- AWS::EC2::RouteTable, AWS::EC2::Route and
  AWS::EC2::SubnetRouteTableAssociation are created but never deleted:
  DeleteStack then fails with "The vpc ... has dependencies". The `delete`
  methods below drop the association, the route, then the table.
- Fn::Cidr (AWS's multi-AZ VPC template cuts its subnets with it) is not
  evaluated: here it is, as CloudFormation documents it (the first COUNT
  blocks of /(32 - BITS), or /(128 - BITS), inside the block).
- AWS::EC2::VPCCidrBlock (the same template's secondary blocks) is
  skipped: here it associates the block with the VPC.
- `!Ref AWS::NoValue` inside Fn::Join is joined as "None": here it is left
  out.
- A resource another one refers to was made at the first reference, before
  what it `DependsOn` (a subnet of a secondary block before the block):
  here its dependencies come first.
- Describing a deleted stack evaluated its outputs again and so made its
  VPC anew: here a deleted stack has no outputs.
- EC2 has no capacity reservations: capacity_reservations.py (beside this
  file) adds CreateCapacityReservation and DescribeCapacityReservations.
- EKS describes every cluster with an endpoint nothing answers and a
  random certificate authority: eks_endpoints.py (beside this file) lets a
  test name the real kube-apiserver of a cluster, and DescribeCluster
  answers with its https endpoint and CA.
- Further additions, one module each, are the `cloud_*.py` files beside
  this one (each module's docstring says what it adds and the AWS page it
  follows); they are installed in name order.
- Every create finishes at once: with FLOW_LATENCY_MODEL naming a table
  (bench/latency.toml), latency_model.py (beside this file) keeps stacks,
  clusters, node groups, file systems and compute environments in progress
  for the table's scaled durations, and counts every call.

Run with moto_server's arguments: python moto_server.py -H 127.0.0.1 -p PORT
"""

import glob
import importlib
import ipaddress
import os
import sys

import moto.cloudformation.parsing as parsing

from moto.cloudformation.models import Stack
from moto.core.common_models import CloudFormationModel
from moto.ec2.models import ec2_backends
from moto.ec2.models.route_tables import Route, RouteTable
from moto.ec2.models.subnets import SubnetRouteTableAssociation
from moto.server import main

import capacity_reservations
import eks_endpoints
import latency_model


def _delete_route_table(self, account_id, region_name):
    backend = ec2_backends[account_id][region_name]
    self._associations.clear()
    self._routes.clear()
    backend.delete_route_table(self.id)


def _delete_route(self, account_id, region_name):
    table = self.route_table
    table._routes.pop(self.id, None)


def _delete_association(self, account_id, region_name):
    backend = ec2_backends[account_id][region_name]
    table = backend.route_tables.get(self.route_table_id)
    if table is not None:
        for association_id, target in list(table._associations.items()):
            if target == self.subnet_id:
                table._associations.pop(association_id)


_clean_json = parsing.clean_json


def _clean_json_with_cidr(resource_json, resources_map):
    if isinstance(resource_json, dict) and "Fn::Cidr" in resource_json:
        block, count, bits = (
            _clean_json_with_cidr(v, resources_map) for v in resource_json["Fn::Cidr"]
        )
        network = ipaddress.ip_network(block, strict=False)
        prefix = network.max_prefixlen - int(bits)
        subnets = network.subnets(new_prefix=prefix)
        return [str(next(subnets)) for _ in range(int(count))]
    if isinstance(resource_json, dict) and "Fn::Join" in resource_json:
        # A `!Ref AWS::NoValue` item is left out, not joined as "None".
        separator, items = resource_json["Fn::Join"]
        items = _clean_json_with_cidr(items, resources_map)
        return separator.join(str(item) for item in items if item is not None)
    return _clean_json(resource_json, resources_map)


class VpcCidrBlock(CloudFormationModel):
    """AWS::EC2::VPCCidrBlock: a secondary IPv4 block of a VPC."""

    # moto registers models by the service named in their module path.
    __module__ = "moto.ec2.models.vpcs"

    def __init__(self, association_id):
        self.association_id = association_id

    @staticmethod
    def cloudformation_type():
        return "AWS::EC2::VPCCidrBlock"

    @staticmethod
    def cloudformation_name_type():
        return ""

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        properties = cloudformation_json["Properties"]
        association = ec2_backends[account_id][region_name].associate_vpc_cidr_block(
            properties["VpcId"],
            cidr_block=properties.get("CidrBlock"),
            amazon_provided_ipv6_cidr_block=bool(
                properties.get("AmazonProvidedIpv6CidrBlock", False)
            ),
        )
        return cls(association["association_id"])

    @property
    def physical_resource_id(self):
        return self.association_id

    def delete(self, account_id, region_name):
        ec2_backends[account_id][region_name].disassociate_vpc_cidr_block(
            self.association_id
        )


_resource = parsing.ResourceMap.__getitem__


def _resource_after_its_dependencies(self, key):
    if key not in self._parsed_resources:
        depends_on = (self._resource_json_map.get(key) or {}).get("DependsOn", [])
        for dependency in [depends_on] if isinstance(depends_on, str) else depends_on:
            if dependency in self._resource_json_map:
                _resource_after_its_dependencies(self, dependency)
    return _resource(self, key)


class _NoOutputs:
    """The outputs of a deleted stack: none."""

    exports = []

    def values(self):
        return []


_delete_stack = Stack.delete


def _delete_stack_and_its_outputs(self):
    _delete_stack(self)
    self.output_map = _NoOutputs()


Stack.delete = _delete_stack_and_its_outputs
parsing.ResourceMap.__getitem__ = _resource_after_its_dependencies
parsing.clean_json = _clean_json_with_cidr
RouteTable.delete = _delete_route_table
Route.delete = _delete_route
SubnetRouteTableAssociation.delete = _delete_association

capacity_reservations.install()
latency_model.install()
# After the latency model: its admin call is neither held nor counted.
eks_endpoints.install()
# What else the local cloud adds to moto, one module each: every
# `cloud_*.py` beside this file, in name order, through its install().
for _path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cloud_*.py"))):
    importlib.import_module(os.path.basename(_path)[:-3]).install()

if __name__ == "__main__":
    sys.exit(main())
