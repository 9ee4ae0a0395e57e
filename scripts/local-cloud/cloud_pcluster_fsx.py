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
"""

import secrets

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

    def to_dict(self):
        out = original_dict(self)
        out.setdefault("Lifecycle", "AVAILABLE")
        return out

    models.FileSystem.__init__ = __init__
    models.FileSystem.to_dict = to_dict
