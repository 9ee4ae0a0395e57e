"""Deleting a ParallelCluster stack as CloudFormation deletes one: moto
5.2.5 leaves two of the cluster template's resources behind when the stack
is deleted (its DeleteStack answers DELETE_COMPLETE all the same):

- AWS::EC2::NetworkInterface (the head node's ENI): moto's delete is called
  with arguments it does not take, and the interface stays. Here, as
  CloudFormation deletes it after the instance that uses it
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-networkinterface.html),
  an interface attached to an instance that is not terminated is refused
  (moto's stack delete tries it again after the instance), one attached to
  a terminated instance is deleted with its addresses freed in the
  subnet.
- AWS::Route53::HostedZone (the cluster's private zone): moto has no
  delete for it. Here the zone is deleted as DeleteHostedZone deletes one
  (https://docs.aws.amazon.com/Route53/latest/APIReference/API_DeleteHostedZone.html:
  refused, HostedZoneNotEmpty, while it holds records other than its NS
  and SOA; ParallelCluster's DELETE_DNS_RECORDS custom resource removes
  its A records first).

And the order: moto deletes a stack's resources in no particular order,
trying again those that fail; ParallelCluster's DELETE_DNS_RECORDS custom
resource then may run after the zone it empties is gone, and fails the
delete ("No hosted zone found"). Here a stack's resources are deleted as
CloudFormation deletes them, each before the resources it refers to (`Ref`,
`Fn::GetAtt`, `Fn::Sub`) or `DependsOn`
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-dependson.html:
"the dependent resource is deleted before the resource it depends on"),
keeping moto's passes again over what failed.
"""

import re

import moto.cloudformation.parsing as parsing
from moto.ec2.models.elastic_network_interfaces import NetworkInterface
from moto.route53.models import FakeZone, route53_backends


def _delete_eni(self, account_id=None, region_name=None):
    instance = self.instance
    if instance is not None:
        if instance.state != "terminated":
            raise RuntimeError(f"{self.id} is in use by {instance.id}")
        # The terminated instance keeps describing its address (moto's
        # instances need their first interface for it).
    if self.id in self.ec2_backend.enis:
        self.ec2_backend.delete_network_interface(eni_id=self.id)
        for address in self.private_ip_addresses:
            self.subnet.del_subnet_ip(address["PrivateIpAddress"])


def _delete_zone(self, account_id, region_name):
    backend = route53_backends[account_id]["aws"]
    if self.id.replace("/hostedzone/", "") in backend.zones:
        backend.delete_hosted_zone(self.id)


def _refers_to(body, names):
    """The resources among `names` that `body` refers to."""
    found = set()
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "Ref" and isinstance(value, str) and value in names:
                found.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else str(value).split(".")[0]
                if target in names:
                    found.add(target)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                for name in re.findall(r"\$\{([^}.!]+)", str(text)):
                    if name in names:
                        found.add(name)
            found |= _refers_to(value, names)
    elif isinstance(body, list):
        for value in body:
            found |= _refers_to(value, names)
    return found


def deletion_order(resource_json_map):
    """Logical ids, each before every resource it refers to or depends on."""
    names = set(resource_json_map)
    needs = {}
    for name, body in resource_json_map.items():
        depends = body.get("DependsOn", [])
        depends = [depends] if isinstance(depends, str) else depends
        needs[name] = (_refers_to(body, names) | set(depends)) & names - {name}
    order, placed = [], set()
    while len(placed) < len(names):
        # Whatever nothing left unplaced refers to goes now.
        ready = sorted(
            n for n in names - placed
            if not any(n in needs[m] for m in names - placed if m != n)
        )
        if not ready:  # a cycle: the rest as they come
            ready = sorted(names - placed)
        order.extend(ready)
        placed.update(ready)
    return order


def _delete_in_order(self):
    """moto's ResourceMap.delete, in CloudFormation's order."""
    remaining = [
        key
        for key in deletion_order(self._resource_json_map)
        if self._resource_json_map[key].get("DeletionPolicy") != "Retain"
    ]
    last_exception = None
    previous = len(remaining) + 1
    while remaining and len(remaining) < previous:
        previous = len(remaining)
        for key in list(remaining):
            parsed = self._parsed_resources.get(key)
            try:
                if not isinstance(parsed, str) and parsed is not None:
                    self._delete_resource(parsed, self._resource_json_map[key])
                    self._parsed_resources.pop(key)
            except Exception as e:  # tried again in the next pass
                last_exception = e
            else:
                remaining.remove(key)
    if remaining and last_exception is not None:
        raise last_exception


def install():
    """Both deletes, on moto's own classes, and the order."""
    parsing.ResourceMap.delete = _delete_in_order
    NetworkInterface.delete = _delete_eni
    FakeZone.delete = _delete_zone
