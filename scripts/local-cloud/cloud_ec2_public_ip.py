"""Public IPv4 addresses of instances launched into public subnets, for the
local cloud.

An instance launched into a subnet whose MapPublicIpOnLaunch is true gets
a public IPv4 address on its primary network interface ("Amazon EC2
instance IP addressing", "Public IPv4 addresses",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html;
the subnet attribute, https://docs.aws.amazon.com/vpc/latest/userguide/subnet-public-ip.html).
ParallelCluster's head node is launched that way with a network interface
its stack makes in the head node's subnet (HeadNodeENI), and the
reference architectures' runbook reaches it at that public address
(`pcluster ssh`, and workflows/pcluster-p5.toml's `head_node_public_ip`).

moto 5.2.5's CloudFormation also drops an AWS::EC2::Subnet's
MapPublicIpOnLaunch
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-subnet.html):
here the subnet gets it, as ModifySubnetAttribute would set it. And moto
gives a public address only to an interface it makes at launch;
one made before (CreateNetworkInterface, a stack's
AWS::EC2::NetworkInterface) and attached as the primary interface stays
without. Here such an instance's primary interface gets an address from
moto's public pool when its subnet maps public addresses on launch.
"""

from moto.ec2.models.instances import InstanceBackend
from moto.ec2.models.subnets import Subnet
from moto.ec2.utils import random_public_ip


def _give_public_ip(instance):
    nic = (getattr(instance, "nics", None) or {}).get(0)
    if nic is None or nic.public_ip:
        return
    subnet = getattr(nic, "subnet", None)
    if subnet is not None and str(subnet.map_public_ip_on_launch).lower() == "true":
        nic.public_ip = random_public_ip()


def install():
    run = InstanceBackend.run_instances

    def run_instances(self, *args, **kwargs):
        reservation = run(self, *args, **kwargs)
        for instance in reservation.instances:
            _give_public_ip(instance)
        return reservation

    InstanceBackend.run_instances = run_instances
    from_template = Subnet.create_from_cloudformation_json.__func__

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, *args, **kwargs):
        subnet = from_template(cls, resource_name, cloudformation_json, *args, **kwargs)
        wanted = (cloudformation_json.get("Properties") or {}).get("MapPublicIpOnLaunch")
        if wanted is not None:
            subnet.map_public_ip_on_launch = str(wanted).lower() == "true"
        return subnet

    Subnet.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
