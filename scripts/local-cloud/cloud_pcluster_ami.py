"""ParallelCluster's official AMIs, as AWS publishes them, for the local
cloud.

A cluster configuration without `Image.CustomAmi` runs on the official
ParallelCluster AMI of its `Image.Os`: pcluster 3.16.1 looks it up with
DescribeImages, `Owners = ["amazon"]`, the filter `name =
aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64*` (version, OS part,
architecture: `pcluster/aws/ec2.py`, `get_official_image_id` and
`_get_official_image_name_prefix`; the OS parts of `pcluster/constants.py`'s
OS_TO_IMAGE_NAME_PART_MAP) and `state = available`, and takes the newest.
AWS publishes one such image per version, OS, architecture and region
("Finding ParallelCluster AMIs": `aws ec2 describe-images --owners amazon
--filters 'Name=name,Values=aws-parallelcluster-3.*'`, and `pcluster
list-official-images`,
https://docs.aws.amazon.com/parallelcluster/latest/ug/pcluster.list-official-images-v3.html;
names such as `aws-parallelcluster-3.16.1-amzn2023-hvm-x86_64-202512011200
2025-12-01T12-00-00.000Z`).

moto publishes none of them. Here every region's AMI backend gets one
available image per OS and architecture of the version in
pcluster-requirements.txt (beside this file), owned by Amazon (alias
`amazon`), its name and description in AWS's form, EBS-backed, HVM, ENA.
An instance launched from it under scripts/local-hosts is a host whose
default user is `ec2-user` (Amazon Linux, RHEL) or `ubuntu`, from the
image's name as AWS's table of default users says (cloud_hosts.py).
"""

import os
import re

from moto.ec2.models.amis import Ami, AmiBackend

HERE = os.path.dirname(os.path.abspath(__file__))
# pcluster/constants.py's OS_TO_IMAGE_NAME_PART_MAP, public OSes only.
OS_PARTS = {
    "alinux2023": ("amzn2023-hvm", "Amazon Linux 2023"),
    "ubuntu2204": ("ubuntu-2204-lts-hvm", "Ubuntu 22.04"),
    "ubuntu2404": ("ubuntu-2404-lts-hvm", "Ubuntu 24.04"),
    "rhel8": ("rhel8-hvm", "RHEL 8"),
    "rhel9": ("rhel9-hvm", "RHEL 9"),
}
ARCHITECTURES = ("x86_64", "arm64")
STAMP = "202512011200"
# The account AWS publishes ParallelCluster's AMIs from (alias `amazon`).
OWNER = "247102896272"


def version():
    """The pcluster version the local cloud's pcluster is pinned to."""
    with open(os.path.join(HERE, "pcluster-requirements.txt")) as f:
        found = re.search(r"aws-parallelcluster==([0-9.]+)", f.read())
    return found.group(1) if found else "3.16.1"


def official_images(backend):
    """Adds the official images to one region's AMI backend."""
    release = version()
    for number, (os_name, (part, label)) in enumerate(sorted(OS_PARTS.items())):
        for arch_number, arch in enumerate(ARCHITECTURES):
            ami_id = "ami-0%07x%09x" % (0x9C1 + number, 0x1000 + arch_number)
            name = "aws-parallelcluster-%s-%s-%s-%s 2025-12-01T12-00-00.000Z" % (
                release,
                part,
                arch,
                STAMP,
            )
            backend.amis[ami_id] = Ami(
                backend,
                ami_id,
                name=name,
                description="AWS ParallelCluster AMI for %s, slurm-24.11, efa, lustre (%s)"
                % (label, os_name),
                owner_id=OWNER,
                owner_alias="amazon",
                public=True,
                virtualization_type="hvm",
                architecture=arch,
                state="available",
                root_device_type="ebs",
                root_device_name="/dev/xvda",
                hypervisor="xen",
                sriov="simple",
                boot_mode="uefi-preferred",
            )


def install():
    original = AmiBackend._load_amis

    def _load_amis(self):
        original(self)
        official_images(self)

    AmiBackend._load_amis = _load_amis
