"""RunInstances' block device mapping filled in from the AMI's, as EC2
fills it in.

On AWS an entry of RunInstances' `BlockDeviceMappings` (or of a launch
template's) for a device the AMI maps may give only what it changes (the
volume type, encryption, deletion on termination): what it leaves out,
the snapshot and the size among them, comes from the AMI's own mapping
for that device, so the root volume is still made from the AMI's root
snapshot, at its size ("Block device mappings for volumes on Amazon EC2
instances", "Update the block device mapping when launching an
instance",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/block-device-mapping-concepts.html;
`EbsBlockDevice`: "VolumeSize ... If you specify a snapshot, the default
is the snapshot size", SnapshotId,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EbsBlockDevice.html).
ParallelCluster relies on it: a compute resource without
`ComputeSettings.LocalStorage.RootVolume.Size` gets a launch template
whose root device entry has a volume type and encryption but no size, so
the nodes' root volumes are the size of their AMI's snapshot.

moto 5.2.5 makes each entry's volume from the entry alone and refuses one
without a size or a snapshot (MissingParameter: "The request must contain
the parameter size/snapshot"). Here such an entry, for a device the AMI's
mapping names, gets the AMI's snapshot for that device; moto then sizes
the volume from the snapshot. An entry for a device the AMI does not map
is left as it is (AWS refuses it too).
"""

from moto.ec2.models.instances import InstanceBackend

_run_instances = InstanceBackend.run_instances


def filled(mappings, image):
    """MAPPINGS (RunInstances' form) with each EBS entry that has neither a
    size nor a snapshot given IMAGE's snapshot for its device."""
    by_device = {
        m.get("DeviceName"): (m.get("Ebs") or {}).get("SnapshotId")
        for m in image.block_device_mappings
    }
    out = []
    for m in mappings:
        ebs = m.get("Ebs")
        if (
            isinstance(ebs, dict)
            and not ebs.get("VolumeSize")
            and not ebs.get("SnapshotId")
            and by_device.get(m.get("DeviceName"))
        ):
            m = dict(m, Ebs=dict(ebs, SnapshotId=by_device[m["DeviceName"]]))
        out.append(m)
    return out


def _run_instances_with_image_mappings(self, image_id, *args, **kwargs):
    mappings = kwargs.get("block_device_mappings")
    if mappings:
        try:
            image = self.describe_images(ami_ids=[image_id])[0]
        except Exception:
            image = None  # an unknown AMI: moto's own behaviour
        if image is not None:
            kwargs["block_device_mappings"] = filled(mappings, image)
    return _run_instances(self, image_id, *args, **kwargs)


def install():
    InstanceBackend.run_instances = _run_instances_with_image_mappings
