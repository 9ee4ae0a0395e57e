"""Instances that are hosts: every EC2 instance moto runs is backed by a
local host you can SSH to, when FLOW_LOCAL_HOSTS names a host manager
(scripts/local-hosts starts one, in a sealed network namespace, and sets
it; see scripts/local-cloud/hosts/manager.py). Unset, nothing changes.

How to ask for a host (other modules of the local cloud):

    import cloud_hosts
    cloud_hosts.enabled()                 # FLOW_LOCAL_HOSTS is set
    # Nothing to do for an instance moto runs (RunInstances, a
    # CloudFormation AWS::EC2::Instance, anything through run_instances):
    # it is a host when RunInstances answers. To have daemons started on
    # it at boot (before the instance is answered as running), register
    # a function of the instance that returns daemon specs:
    cloud_hosts.on_boot(lambda instance: [
        {"name": "slurmd", "argv": ["/usr/sbin/slurmd", "-D", "-N", "n1"],
         "env": {"SLURM_CONF": "/…/slurm.conf"}},
    ] if instance.get_tags() … else [])
    # Or start one later, on a host that is already up:
    cloud_hosts.run_daemon(instance.id, "munged", ["/usr/sbin/munged", "-F"])
    cloud_hosts.host(instance.id)         # its HOST dict (ip, pid, dir, …)

A daemon runs in the host's namespaces (its network, hostname, /run, PID
namespace), as root, its output in HOST["dir"]/NAME.log, and ends with the
host. Enter a host from a script with `nsenter -t HOST["pid"] -n -u -m -p`.

What AWS behaviour is modelled, and the page each part follows:

- The host has the instance's primary private IPv4 address, and its
  hostname is the instance's private DNS name, the IP name AWS gives it
  (`ip-10-0-1-4.ec2.internal` in us-east-1,
  `ip-10-0-1-4.REGION.compute.internal` elsewhere: "Amazon EC2 instance
  hostname types", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-naming.html).
- Its sshd lets in the AMI's default user with the public key of the key
  pair named at launch (CreateKeyPair, ImportKeyPair), which AWS puts in
  that user's authorized_keys ("Amazon EC2 key pairs and Amazon EC2
  instances", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-key-pairs.html).
  Launched without a key pair, nobody can log in, as on AWS.
- The default user is chosen from the AMI's name and description as AWS's
  table of default user names gives it ("Manage system users on your
  Amazon EC2 Linux instance",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/managing-users.html):
  Ubuntu `ubuntu`, Debian `admin`, CentOS `centos`, Fedora `fedora`,
  Bitnami `bitnami`, anything else (Amazon Linux, RHEL, SUSE, an AMI
  unknown to moto) `ec2-user`. On the host it is uid 0, as if every
  command went through its passwordless sudo.
- The host has a root volume of its own (hosts/manager.py: a writable
  layer over /etc, /home, /opt, /root, /srv, /usr and /var): what is
  written there stays on the instance, as on its EBS root volume, and
  never reaches this machine's /. Launched from an AMI made by CreateImage
  of a host, it starts with that image's content under its own layer
  (cloud_hosts_images.py).
- TerminateInstances (and a CloudFormation stack's delete of its instance)
  shuts the host down: its address stops answering at once
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/terminating-instances.html),
  and its root volume is deleted (DeleteOnTermination, true for the root
  volume by default). StopInstances shuts it down too and keeps the
  volume; StartInstances boots it again at the same private address,
  which a stopped instance keeps, on the same volume
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Stop_Start.html).
- An instance with a public IPv4 address (its subnet's
  MapPublicIpOnLaunch, or AssociatePublicIpAddress at launch: "Amazon EC2
  instance IP addressing", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-instance-addressing.html)
  answers at it too: the host gets the address on its interface with
  its sshd listening there as well, and the sealed namespace a /32 route
  to it over the bridge (nothing else reaches it: the namespace has no
  other link). The route goes with the host. (On AWS the address is
  translated to the private one on the way in; the host sees both here.)
- An instance that cannot be a host (its address is already another
  host's, the manager cannot start one) is not launched: RunInstances
  fails with InsufficientInstanceCapacity, AWS's error when it has no
  capacity for a launch (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html),
  and the instances of that call are terminated.
"""

import ipaddress
import os
import subprocess
import sys
import threading

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instances import Instance, InstanceBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts"))
import hosts_client as client  # noqa: E402  (hosts/hosts_client.py)

_BOOT = []
_LOCK = threading.Lock()
# instance id -> the public address routed to its host
_PUBLIC = {}

# (substring of the AMI's name or description, lower case) -> default user
DEFAULT_USERS = [
    ("ubuntu", "ubuntu"),
    ("debian", "admin"),
    ("centos", "centos"),
    ("fedora", "fedora"),
    ("bitnami", "bitnami"),
]


def enabled():
    """Whether instances are hosts: FLOW_LOCAL_HOSTS names a manager."""
    return client.socket_path() is not None


def on_boot(daemons_of):
    """Registers DAEMONS_OF(instance) -> [daemon spec]: daemons started on
    each instance's host when it boots (the manager's "daemon" specs:
    name, argv, env)."""
    _BOOT.append(daemons_of)


def run_daemon(instance_id, name, argv, env=None):
    """Starts a daemon on the running host of INSTANCE_ID; returns its HOST."""
    return client.call(
        {"op": "daemon", "id": instance_id, "name": name, "argv": argv, "env": env or {}}
    )["host"]


def host(instance_id):
    """The HOST dict of INSTANCE_ID's host, or None when it has none."""
    for found in client.call({"op": "list"})["hosts"]:
        if found["id"] == instance_id:
            return found
    return None


def default_user(instance):
    """The default user of the instance's AMI (see the module's docstring)."""
    image = getattr(instance.ec2_backend, "amis", {}).get(instance.image_id)
    words = " ".join(
        str(getattr(image, field, "") or "") for field in ("name", "description")
    ).lower()
    for needle, user in DEFAULT_USERS:
        if needle in words:
            return user
    return "ec2-user"


def image_snapshot(instance):
    """The snapshot behind the instance's AMI (its root device's), whose
    captured layers the host starts on (cloud_hosts_images.py); None for
    an AMI moto does not hold."""
    image = getattr(instance.ec2_backend, "amis", {}).get(instance.image_id)
    snapshot = getattr(image, "ebs_snapshot", None)
    return getattr(snapshot, "id", None)


def _spec(instance):
    keys = ""
    if instance.key_name:
        pair = instance.ec2_backend.key_pairs.get(instance.key_name)
        if pair is not None:
            keys = pair.public_key.strip() + "\n"
    daemons = []
    for daemons_of in _BOOT:
        daemons.extend(daemons_of(instance) or [])
    return {
        "id": instance.id,
        "ip": instance.private_ip,
        "hostname": instance.private_dns_name,
        "user": default_user(instance),
        "authorized_keys": keys,
        "daemons": daemons,
        "image": image_snapshot(instance),
    }


def _public_ip(instance):
    """The instance's public address, when it has one outside the bridge's
    private ranges."""
    public = getattr(instance, "public_ip", None)
    if not public or ipaddress.ip_address(public).is_private:
        return None
    return public


def _route(verb, address):
    """Adds or deletes the sealed namespace's route to a public address."""
    subprocess.run(
        ["ip", "route", verb, address + "/32", "dev", "flowbr0"], capture_output=True
    )


def _start(instances):
    if not instances:
        return
    started = client.call({"op": "start", "hosts": [_spec(i) for i in instances]})["hosts"]
    for instance, host in zip(instances, started):
        public = _public_ip(instance)
        if public:
            # The address on the host's interface, its sshd listening
            # there too (the same keys and user), and the route to it.
            run_daemon(
                instance.id,
                "public_sshd",
                ["sh", "-c", "ip addr add %s/32 dev eth0 && exec /usr/sbin/sshd -D -f %s/sshd_config"
                 " -o ListenAddress=%s:22 -E %s/sshd-public.log" % (public, host["dir"], public, host["dir"])],
            )
            _PUBLIC[instance.id] = public
            _route("replace", public)


def _stop(ids, keep_volumes=False):
    # A shutdown is not refused on AWS: a manager that cannot be reached is
    # said in moto's log, and the instance ends all the same.
    if ids:
        try:
            client.call({"op": "stop", "ids": list(ids), "keep_volumes": keep_volumes})
            for address in filter(None, (_PUBLIC.pop(i, None) for i in ids)):
                _route("del", address)
        except client.HostError as e:
            print("cloud_hosts: stopping %s: %s" % (", ".join(ids), e), file=sys.stderr)


class InsufficientInstanceCapacity(EC2ClientError):
    """RunInstances' error when the instances cannot be hosts."""

    def __init__(self, message):
        super().__init__("InsufficientInstanceCapacity", message)


_run_instances = InstanceBackend.run_instances
_terminate = Instance.terminate
_stop_instance = Instance.stop
_start_instance = Instance.start


def _run_instances_as_hosts(self, *args, **kwargs):
    reservation = _run_instances(self, *args, **kwargs)
    if enabled():
        try:
            with _LOCK:
                _start(reservation.instances)
        except client.HostError as e:
            for instance in reservation.instances:
                instance.terminate()
            raise InsufficientInstanceCapacity(
                "the local cloud could not make these instances hosts: %s" % e
            )
    return reservation


def _terminate_host(self):
    was = self._state.name
    if enabled() and was != "terminated":
        # The host goes before EC2 lets its address go: moto hands a
        # released address to the next RunInstances at once, and one in
        # another request that started its host first found the address
        # still on the bridge ("already a host's"). A stopped instance has
        # no host, but it still has its volume.
        with _LOCK:
            _stop([self.id])
    return _terminate(self)


def _stop_host(self):
    answer = _stop_instance(self)
    if enabled():
        with _LOCK:
            _stop([self.id], keep_volumes=True)
    return answer


def _start_host(self):
    was = self._state.name
    answer = _start_instance(self)
    if enabled() and was == "stopped":
        with _LOCK:
            _start([self])
    return answer


def install():
    """Backs moto's instances with hosts (only while FLOW_LOCAL_HOSTS is set
    at the time of each call)."""
    InstanceBackend.run_instances = _run_instances_as_hosts
    Instance.terminate = _terminate_host
    Instance.stop = _stop_host
    Instance.start = _start_host
