"""Images of instances that are hosts: the AMI carries what was written on
the instance, and the instances launched from it start with it.

What AWS does, and the page each part follows:

- CreateImage of an EBS-backed instance makes an EBS snapshot of each of
  its volumes, the root volume's among them, and registers the AMI with
  them in its block device mapping ("Create an Amazon EBS-backed AMI",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/creating-an-ami-ebs.html;
  CreateImage, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateImage.html).
  The snapshot is the volume as it was at that moment: later writes on
  the instance are not in it.
- An instance launched from the AMI gets a new root volume made from that
  snapshot: it starts with the content the source instance had ("Amazon
  EBS-backed AMIs": "the root device for an instance launched from the AMI
  is an Amazon EBS volume created from an Amazon EBS snapshot",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ComponentsAMIs.html#storage-for-the-root-device).
  An AMI made from such an instance holds both: what its own image had,
  and what was written since.
- DeregisterImage keeps the snapshots; DeleteSnapshot removes one, and is
  refused while a registered AMI uses it (InvalidSnapshot.InUse, moto's
  own). Instances already launched keep their volumes ("Deregister an
  AMI", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/deregister-ami.html).

Here (under scripts/local-hosts, FLOW_LOCAL_HOSTS set): a host's root
volume is its writable layer over the system's folders (hosts/manager.py,
host-init). CreateImage of an instance that is a host asks the manager to
capture it under the snapshot moto makes for the AMI (`ebs_snapshot`, the
one DescribeImages names in the block device mapping): its layer copied,
over the layers of its own image. RunInstances with that AMI starts the
host on those layers (cloud_hosts.py names the snapshot in the host's
spec; the manager links the layers into the new volume, so a snapshot
deleted later leaves running instances as they were). DeleteSnapshot
removes the captured layers. An AMI moto ships (its catalogue's, the
ParallelCluster images) has no captured layers: its instances start on
this machine's own system, the "base image" of every host.

Not modelled: CopyImage (the copy's snapshot has no layers), RegisterImage
from a snapshot, the volumes of an instance other than the root volume,
and the reboot CreateImage does unless NoReboot.
"""

import os
import sys

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.amis import AmiBackend
from moto.ec2.models.elastic_block_store import EBSBackend

import cloud_hosts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts"))
import hosts_client as client  # noqa: E402  (hosts/hosts_client.py)

_create_image = AmiBackend.create_image
_delete_snapshot = EBSBackend.delete_snapshot


class ImageCaptureFailed(EC2ClientError):
    """CreateImage's error when the host's volume could not be captured."""

    def __init__(self, message):
        super().__init__("InternalError", message)


def _create_image_of_host(self, instance_id, *args, **kwargs):
    image = _create_image(self, instance_id, *args, **kwargs)
    if cloud_hosts.enabled():
        snapshot = image.ebs_snapshot.id
        try:
            client.call({"op": "capture", "id": instance_id, "snapshot": snapshot})
        except client.HostError as e:
            # No half-made image: the AMI and its snapshot go.
            self.deregister_image(image.id)
            _delete_snapshot(self, snapshot)
            raise ImageCaptureFailed(
                "the local cloud could not capture the root volume of %s: %s" % (instance_id, e)
            )
    return image


def _delete_snapshot_and_layers(self, snapshot_id):
    answer = _delete_snapshot(self, snapshot_id)
    if cloud_hosts.enabled():
        try:
            client.call({"op": "forget", "snapshot": snapshot_id})
        except client.HostError as e:
            # The snapshot is gone in the API; its layers are left in the
            # manager's work folder, which goes when local-hosts ends.
            print("cloud_hosts_images: forgetting %s: %s" % (snapshot_id, e), file=sys.stderr)
    return answer


def install():
    """Captures hosts' volumes on CreateImage, drops them on DeleteSnapshot
    (only while FLOW_LOCAL_HOSTS is set at the time of each call)."""
    AmiBackend.create_image = _create_image_of_host
    EBSBackend.delete_snapshot = _delete_snapshot_and_layers
