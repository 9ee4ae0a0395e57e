"""Instance store volumes in block device mappings, for the local cloud.

A block device mapping may name an instance store volume instead of an
EBS one: `{"DeviceName": "/dev/sdb", "VirtualName": "ephemeral0"}`, no
`Ebs` ("Block device mappings for volumes on Amazon EC2 instances",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/block-device-mapping-concepts.html;
API_BlockDeviceMapping: VirtualName "ephemeralN"). ParallelCluster's launch
templates map every instance store volume that way, and its launch
template validators send them to RunInstances with DryRun.

moto 5.2.5 refuses such a mapping in RunInstances ("The request must
contain the parameter ebs") and, launching from a launch template that
has one, fails on the missing `Ebs` key. Here a mapping with a
VirtualName and no Ebs is accepted and launches no EBS volume (an
instance store volume is part of the host, not a volume EC2 describes);
every other mapping is checked and made as moto does.
"""

from moto.ec2.models.instances import InstanceBackend
from moto.ec2.responses.instances import InstanceResponse


def is_instance_store(mapping):
    """Whether MAPPING names an instance store volume (no EBS)."""
    return bool(mapping.get("VirtualName")) and not mapping.get("Ebs")


def install():
    validate = InstanceResponse._validate_block_device_mapping
    parse = InstanceResponse._parse_block_device_mapping
    run = InstanceBackend.run_instances

    def _validate(device_mapping):
        if is_instance_store(device_mapping):
            return
        validate(device_mapping)

    def _parse(self):
        wanted = self._get_param("BlockDeviceMappings", [])
        mappings = parse(self)
        return [m for m, asked in zip(mappings, wanted) if not is_instance_store(asked)]

    def _run(self, image_id, count, user_data, security_group_names, **kwargs):
        template = kwargs.get("launch_template")
        if template and "block_device_mappings" not in kwargs:
            data = self._get_template_from_args(template).data
            mappings = data.get("BlockDeviceMappings") or []
            if any(is_instance_store(m) for m in mappings):
                kwargs["block_device_mappings"] = [
                    m for m in mappings if not is_instance_store(m)
                ]
        return run(self, image_id, count, user_data, security_group_names, **kwargs)

    InstanceResponse._validate_block_device_mapping = staticmethod(_validate)
    InstanceResponse._parse_block_device_mapping = _parse
    InstanceBackend.run_instances = _run
