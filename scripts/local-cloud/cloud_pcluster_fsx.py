"""FSx for Lustre file systems of AWS's shape, for the local cloud.

AWS's file system ids are `fs-` and 17 hexadecimal digits
(https://docs.aws.amazon.com/fsx/latest/APIReference/API_FileSystem.html:
FileSystemId, "Pattern: ^(fs-[0-9a-f]{8,})$", and every example the FSx
for Lustre guide shows, e.g. `fs-0123456789abcdef0` in
https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html).
ParallelCluster's configuration schema takes only that form for an existing
file system (`SharedStorage[].FsxLustreSettings.FileSystemId`, "^fs-[0-9a-z]{17}$"
in aws-parallelcluster 3.16.1's `schemas/cluster_schema.py`), so moto's
`fs-` + 8 digits is refused before pcluster looks at it.

Here a file system moto makes gets an id of AWS's form; its DNS name and
ARN follow the id as AWS's do (`fs-….fsx.REGION.amazonaws.com`,
`arn:aws:fsx:REGION:ACCOUNT:file-system/fs-…`), and its tags are kept
under the ARN that is answered. A Lustre file system also gets the fields
DescribeFileSystems answers that moto leaves out and pcluster reads:
`Lifecycle` AVAILABLE (moto makes it at once) and `LustreConfiguration.MountName`
(API_LustreFileSystemConfiguration: "fsx" for SCRATCH_1, else an 8
character name AWS picks).

A file system is reached through the elastic network interfaces FSx makes
in its subnets, with its security groups (API_FileSystem: VpcId,
NetworkInterfaceIds; "File system access control with Amazon VPC",
https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html).
ParallelCluster's ExistingFsxNetworkingValidator reads them (the interfaces'
groups must let the cluster's nodes in on Lustre's ports). Here each file
system gets one interface per subnet in moto's EC2, described as FSx's
are, and they are deleted with the file system (so that its subnets can
go).
"""

import secrets

from moto.ec2.models import ec2_backends
from moto.fsx import models


def _aws_id():
    return "fs-" + secrets.token_hex(9)[:17]


def install():
    original = models.FileSystem.__init__
    original_dict = models.FileSystem.to_dict

    def __init__(self, account_id, region_name, *args, **kwargs):
        original(self, account_id, region_name, *args, **kwargs)
        old_arn = self.resource_arn
        self.file_system_id = _aws_id()
        self.dns_name = f"{self.file_system_id}.fsx.{region_name}.amazonaws.com"
        self.resource_arn = (
            f"arn:aws:fsx:{region_name}:{account_id}:file-system/{self.file_system_id}"
        )
        tags = self.backend.list_tags_for_resource(old_arn)
        if tags:
            self.backend.tagger.delete_all_tags_for_resource(old_arn)
            self.backend.tagger.tag_resource(self.resource_arn, tags)
        if self.file_system_type == "LUSTRE":
            lustre = dict(self.lustre_configuration or {})
            if "MountName" not in lustre:
                scratch1 = lustre.get("DeploymentType") == "SCRATCH_1"
                lustre["MountName"] = "fsx" if scratch1 else secrets.token_hex(4)
            self.lustre_configuration = lustre

        ec2 = ec2_backends[account_id][region_name]
        self.network_interface_ids, self.vpc_id = [], None
        for subnet_id in self.subnet_ids or []:
            subnet = ec2.get_subnet(subnet_id)
            self.vpc_id = subnet.vpc_id
            eni = ec2.create_network_interface(
                subnet,
                None,
                group_ids=list(self.security_group_ids or []),
                description="ENI for FSx for Lustre file system %s" % self.file_system_id,
            )
            self.network_interface_ids.append(eni.id)

    def to_dict(self):
        out = original_dict(self)
        out.setdefault("Lifecycle", "AVAILABLE")
        out["NetworkInterfaceIds"] = list(getattr(self, "network_interface_ids", []))
        if getattr(self, "vpc_id", None):
            out["VpcId"] = self.vpc_id
        return out

    original_delete = models.FSxBackend.delete_file_system

    def delete_file_system(self, file_system_id, *args, **kwargs):
        found = self.file_systems.get(file_system_id)
        answer = original_delete(self, file_system_id, *args, **kwargs)
        if found is not None:
            ec2 = ec2_backends[self.account_id][self.region_name]
            for eni_id in getattr(found, "network_interface_ids", []):
                ec2.delete_network_interface(eni_id)
        return answer

    models.FileSystem.__init__ = __init__
    models.FileSystem.to_dict = to_dict
    models.FSxBackend.delete_file_system = delete_file_system
