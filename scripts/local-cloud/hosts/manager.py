"""The host manager of the local cloud: makes and ends local hosts.

scripts/local-hosts starts it inside the sealed network namespace (no route
but the bridge `flowbr0` and loopback), after making the bridge. Each host
is its own network, UTS, mount and PID namespace (host-init beside this
file is its PID 1), joined to the bridge by a veth pair, with the address
and hostname it was asked for and an sshd on that address that lets in one
user (the instance's default user) with the keys it was given, and with
those in its ~/.ssh/authorized_keys (HOST["dir"]/home/USER/.ssh in the
host's /etc/passwd), where a script run on the host (a HyperPod lifecycle
script) adds a user's key as it would on an instance. Killing a
host's PID 1 ends every process of the host, and its network namespace and
veth with them.

Each host has a root volume (WORK/volumes/ID): a writable layer over each
of the system's folders in LAYERED (/etc, /home, /opt, /root, /srv, /usr
with /usr/local, /var with /var/lib; host-init mounts them as overlays in
the host's own mount namespace). What the host writes there stays in its
volume and never reaches the machine's /. A start may name an image
("image": a snapshot id): the layers captured for that snapshot ("capture")
lie, read-only, between the volume and the machine's folders. A stop
removes the volume unless asked to keep it (a stopped instance's root
volume, which its next start finds). What is not layered is shared with
the machine: /tmp (where this manager's work folder and the hosts' homes
are) and new folders at /.

Protocol: one JSON request per connection on the Unix socket
(FLOW_LOCAL_HOSTS), one JSON answer, then the connection closes. Every
answer has "ok"; a failed one has "error" (what went wrong, and where to
look).

    {"op": "start", "hosts": [{"id": "i-…", "ip": "10.0.1.4",
        "hostname": "ip-10-0-1-4.ec2.internal", "user": "ec2-user",
        "authorized_keys": "ssh-ed25519 AAAA… name\\n",
        "daemons": [{"name": "slurmd", "argv": ["/usr/sbin/slurmd", "-D"],
                     "env": {"SLURM_CONF": "/…/slurm.conf"}}]}]}
        -> {"ok": true, "hosts": [HOST, …]}   (all of them, or none)
    {"op": "stop", "ids": ["i-…"]}      -> {"ok": true, "stopped": [ids]}
    {"op": "daemon", "id": "i-…", "name": "munged", "argv": [...],
        "env": {...}}                   -> {"ok": true, "host": HOST}
    {"op": "list"}                      -> {"ok": true, "hosts": [HOST, …]}
    {"op": "stop", "ids": [...], "keep_volumes": true}   (the volumes stay)
    {"op": "capture", "id": "i-…", "snapshot": "snap-…"}
        -> {"ok": true, "captured": true, "layers": [DIR, …]}  (newest first;
           "captured": false when ID has no volume: not a host)
    {"op": "forget", "snapshot": "snap-…"} -> {"ok": true, "forgot": bool}

HOST is {"id", "ip", "hostname", "user", "pid" (the host's PID 1, in the
manager's PID namespace: enter the host with `nsenter -t PID -n -u -m -p`),
"netns" ("/proc/PID/ns/net"), "dir" (its files: sshd.log, DAEMON.log),
"host_key" (the host's public key, made for this host on this run),
"daemons" ([names]), "start_s" (seconds from the request to sshd
accepting), "volume" (its root volume's folder), "image_layers" ([DIR, …],
the newest first)}. A start is answered once sshd accepts TCP on the address.

Run: python3 manager.py --socket PATH --work DIR --bridge flowbr0
"""

import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOST_INIT = os.path.join(HERE, "host-init")

# The folders of a host's root volume: where a playbook or a package
# installs (/etc, /usr with /usr/local, /opt, /var with /var/lib and
# /var/log, /srv) and the users' homes (/home, /root). /tmp is left shared
# (the work folder and the hosts' homes are there, written after a host
# starts), and so is / itself.
LAYERED = ("etc", "home", "opt", "root", "srv", "usr", "var")

# The private ranges (RFC 1918) the bridge carries, with the bridge's own
# address in each: the first address of the range, which AWS reserves in
# every subnet (the VPC router's), so never an instance's.
RANGES = [
    (ipaddress.ip_network("10.0.0.0/8"), "10.0.0.1"),
    (ipaddress.ip_network("172.16.0.0/12"), "172.16.0.1"),
    (ipaddress.ip_network("192.168.0.0/16"), "192.168.0.1"),
]

SSHD_CONFIG = """\
# A throwaway sshd for local host {id} (scripts/local-cloud/hosts/manager.py)
ListenAddress {ip}:22
HostKey {dir}/ssh_host_ed25519_key
AuthorizedKeysFile {dir}/authorized_keys .ssh/authorized_keys
AllowUsers {user}
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


class Failed(Exception):
    """A request that cannot be carried out; its text is the answer's error."""


class Host:
    """One running host."""

    def __init__(self, spec, index, work):
        self.id = spec["id"]
        self.ip = spec["ip"]
        self.hostname = spec["hostname"]
        self.user = spec["user"]
        self.keys = spec.get("authorized_keys", "")
        self.daemons = []
        self.dir = os.path.join(work, "hosts", "%s-%d" % (self.id, index))
        self.volume = _volume(work, self.id)
        self.image_layers = []
        self.volume_was_there = os.path.isdir(self.volume)
        self.bridge_end = "fh%d" % index
        self.host_end = "fp%d" % index
        self.process = None
        self.pid = None
        self.start_s = None
        self.host_key = ""

    def describe(self):
        return {
            "id": self.id,
            "ip": self.ip,
            "hostname": self.hostname,
            "user": self.user,
            "pid": self.pid,
            "netns": "/proc/%s/ns/net" % self.pid,
            "dir": self.dir,
            "host_key": self.host_key,
            "daemons": list(self.daemons),
            "start_s": self.start_s,
            "volume": self.volume,
            "image_layers": list(self.image_layers),
        }


def _checked_id(text, what):
    """TEXT when it is a plain id (letters, digits, '-', '_', '.'): it
    names a folder."""
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", text) or text in (".", ".."):
        raise Failed("%s is not an id: %r" % (what, text))
    return text


def _volume(work, host_id):
    return os.path.join(work, "volumes", _checked_id(host_id, "a host id"))


def _snapshot(work, snapshot_id):
    return os.path.join(work, "snapshots", _checked_id(snapshot_id, "a snapshot id"))


def _layers_of(snapshot_dir):
    """The layers captured for a snapshot, newest first."""
    layers = os.path.join(snapshot_dir, "layers")
    if not os.path.isdir(layers):
        return []
    return [os.path.join(layers, n) for n in sorted(os.listdir(layers), key=int)]


def _range_of(ip):
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise Failed("not an IPv4 address: %r" % ip)
    for network, bridge_address in RANGES:
        if address in network:
            if str(address) == bridge_address or address in (
                network.network_address,
                network.broadcast_address,
            ):
                raise Failed("%s is the bridge's own or a reserved address" % ip)
            return network
    raise Failed(
        "%s is outside the bridge's ranges (%s)"
        % (ip, ", ".join(str(n) for n, _ in RANGES))
    )


def _run(argv, stdin=None):
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise Failed("%s: %s" % (" ".join(argv[:3]), done.stderr.strip()))
    return done.stdout


def _tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Manager:
    """Every host of this run, by instance id."""

    def __init__(self, work, bridge):
        real = os.path.realpath(work)
        for folder in LAYERED:
            if real == "/" + folder or real.startswith("/%s/" % folder):
                # overlayfs refuses a writable layer inside its lower one.
                raise SystemExit(
                    "manager: the work folder %s is under /%s, a folder of the hosts' root"
                    " volumes: use one under /tmp" % (work, folder)
                )
        self.work = work
        self.bridge = bridge
        self.hosts = {}
        self.count = 0

    # -- start ---------------------------------------------------------

    def start(self, specs, limit_s=20.0):
        began = time.monotonic()
        taken = {h.ip for h in self.hosts.values()}
        new = []
        for spec in specs:
            for field in ("id", "ip", "hostname", "user"):
                if not isinstance(spec.get(field), str) or not spec[field]:
                    raise Failed("a host needs %s (a string): %r" % (field, spec))
            if spec["id"] in self.hosts:
                raise Failed("host %s is already running" % spec["id"])
            _range_of(spec["ip"])
            if spec["ip"] in taken:
                raise Failed("address %s is already a host's on the bridge" % spec["ip"])
            taken.add(spec["ip"])
            if spec.get("image") is not None:
                _checked_id(spec["image"], "image")
            self.count += 1
            new.append(Host(spec, self.count, self.work))
        try:
            self._boot(new, specs, began, limit_s)
        except BaseException:
            for host in new:
                self._end(host)
                if not host.volume_was_there:
                    shutil.rmtree(host.volume, ignore_errors=True)
            raise
        for host in new:
            self.hosts[host.id] = host
        return [h.describe() for h in new]

    def _volume_of(self, host, image):
        """Makes HOST's root volume (or finds it: a stopped instance's),
        its image's layers linked into it: the volume is the instance's
        own, whatever later happens to the snapshot it was made from."""
        linked = os.path.join(host.volume, "image")
        if not host.volume_was_there:
            os.makedirs(host.volume)
            os.makedirs(linked)
            snapshot_layers = _layers_of(_snapshot(self.work, image)) if image else []
            for number, layer in enumerate(snapshot_layers):
                # Captured layers are never written again: hard links share
                # their files at no cost (cp -l), and outlive the snapshot.
                _run(["cp", "-al", layer, os.path.join(linked, str(number))])
        host.image_layers = [
            os.path.join(linked, n) for n in sorted(os.listdir(linked), key=int)
        ]
        # host-init mounts these: for each folder, the volume's writable
        # layer over the image's layers (newest first) over the machine's.
        lines = []
        for folder in LAYERED:
            upper = os.path.join(host.volume, "upper", folder)
            work = os.path.join(host.volume, "work", folder)
            os.makedirs(upper, exist_ok=True)
            os.makedirs(work, exist_ok=True)
            lower = [os.path.join(layer, folder) for layer in host.image_layers]
            lower = [d for d in lower if os.path.isdir(d)] + ["/" + folder]
            lines.append(
                "volume-%s /%s overlay lowerdir=%s,upperdir=%s,workdir=%s 0 0\n"
                % (folder, folder, ":".join(lower), upper, work)
            )
        with open(os.path.join(host.dir, "volume.fstab"), "w") as f:
            f.writelines(lines)

    def _boot(self, new, specs, began, limit_s):
        keygens = []
        for host, spec in zip(new, specs):
            os.makedirs(os.path.join(host.dir, "home", host.user), exist_ok=True)
            self._volume_of(host, spec.get("image"))
            with open(os.path.join(host.dir, "authorized_keys"), "w") as f:
                f.write(host.keys)
            with open(os.path.join(host.dir, "sshd_config"), "w") as f:
                f.write(SSHD_CONFIG.format(id=host.id, ip=host.ip, dir=host.dir, user=host.user))
            with open("/etc/passwd") as f:
                others = f.read()
            # The default user first, so that uid 0 is named after it in the
            # host (`whoami` says ec2-user), as root it is: what it runs on
            # the host it runs as root would with sudo.
            line = "%s:*:0:0:default user of %s:%s:/bin/bash\n" % (
                host.user,
                host.id,
                os.path.join(host.dir, "home", host.user),
            )
            with open(os.path.join(host.dir, "passwd"), "w") as f:
                f.write(line + others)
            keygens.append(
                subprocess.Popen(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.hostname,
                     "-f", os.path.join(host.dir, "ssh_host_ed25519_key")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        for keygen in keygens:
            if keygen.wait() != 0:
                raise Failed("ssh-keygen failed: %s" % keygen.stderr.read().decode())
        for host in new:
            with open(os.path.join(host.dir, "ssh_host_ed25519_key.pub")) as f:
                host.host_key = f.read().strip()
        _run(
            ["ip", "-batch", "-"],
            "".join(
                "link add %s type veth peer name %s\nlink set %s master %s up\n"
                % (h.bridge_end, h.host_end, h.bridge_end, self.bridge)
                for h in new
            ),
        )
        for host in new:
            network = _range_of(host.ip)
            routes = [str(n) for n, _ in RANGES if n != network]
            log = open(os.path.join(host.dir, "init.log"), "w")
            # setpriv: the host's unshare dies with this manager, and with it
            # (--kill-child) the host's PID 1 and so the whole host.
            host.process = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--uts", "--mount",
                 "--pid", "--fork", "--mount-proc", "--kill-child", HOST_INIT, host.dir,
                 host.host_end, "%s/%d" % (host.ip, network.prefixlen), host.hostname]
                + routes,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
        # The veth end moves into the host once unshare has made its netns.
        for host in new:
            host.pid = self._init_pid(host, began + limit_s)
        _run(
            ["ip", "-batch", "-"],
            "".join("link set %s netns %d\n" % (h.host_end, h.pid) for h in new),
        )
        # What the bridge's side remembers of an address's earlier host (a
        # terminated instance's) would hold packets to the new one for
        # seconds: forget it.
        for host in new:
            subprocess.run(["ip", "neigh", "flush", "to", host.ip], capture_output=True)
        for host, spec in zip(new, specs):
            self._wait_sshd(host, began + limit_s)
            host.start_s = round(time.monotonic() - began, 3)
            for daemon in spec.get("daemons") or []:
                self.daemon(host.id, daemon, host)

    def _init_pid(self, host, deadline):
        """The host's PID 1 (unshare's child), once unshare has forked it."""
        unshare = host.process.pid
        children = "/proc/%d/task/%d/children" % (unshare, unshare)
        while time.monotonic() < deadline:
            if host.process.poll() is not None:
                raise Failed(
                    "host %s (%s) did not start: %s"
                    % (host.id, host.ip, _tail(os.path.join(host.dir, "init.log")))
                )
            try:
                with open(children) as f:
                    pids = f.read().split()
            except OSError:
                pids = []
            if pids:
                return int(pids[0])
            time.sleep(0.005)
        raise Failed("host %s (%s): its namespaces were not made in time" % (host.id, host.ip))

    def _wait_sshd(self, host, deadline):
        while True:
            if host.process.poll() is not None:
                raise Failed(
                    "host %s (%s) ended while starting: %s%s"
                    % (host.id, host.ip, _tail(os.path.join(host.dir, "init.log")),
                       _tail(os.path.join(host.dir, "sshd.log")))
                )
            # host-init says when sshd accepts inside; then one look from
            # the bridge's side confirms the address answers there too.
            if os.path.exists(os.path.join(host.dir, "ready")):
                try:
                    with socket.create_connection((host.ip, 22), timeout=2):
                        return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise Failed(
                    "host %s: sshd on %s:22 did not answer in time; sshd.log: %s"
                    % (host.id, host.ip, _tail(os.path.join(host.dir, "sshd.log")))
                )
            time.sleep(0.01)

    # -- daemons -------------------------------------------------------

    def daemon(self, host_id, spec, host=None):
        host = host or self.hosts.get(host_id)
        if host is None:
            raise Failed("no host %s" % host_id)
        name, argv = spec.get("name"), spec.get("argv")
        if not isinstance(name, str) or not name.isidentifier():
            raise Failed("a daemon needs a name (letters, digits, _): %r" % (name,))
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise Failed("daemon %s needs argv, a list of strings" % name)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        log = open(os.path.join(host.dir, "%s.log" % name), "ab")
        subprocess.Popen(
            ["nsenter", "-t", str(host.pid), "-n", "-u", "-m", "-p", "--"] + argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        host.daemons.append(name)
        return host.describe()

    # -- stop ----------------------------------------------------------

    def stop(self, ids, keep_volumes=False):
        stopped = []
        for host_id in ids:
            host = self.hosts.pop(host_id, None)
            if host is not None:
                self._end(host)
                stopped.append(host_id)
            if not keep_volumes:
                # A terminated instance's root volume goes with it
                # (DeleteOnTermination, the root volume's default).
                shutil.rmtree(_volume(self.work, host_id), ignore_errors=True)
        return stopped

    # -- images --------------------------------------------------------

    def capture(self, host_id, snapshot_id):
        """The snapshot of HOST_ID's root volume: its writable layer, copied
        as it is now, over the layers of its own image (linked)."""
        volume = _volume(self.work, host_id)
        if not os.path.isdir(volume):
            return {"captured": False, "layers": []}
        final = _snapshot(self.work, snapshot_id)
        if os.path.exists(final):
            raise Failed("snapshot %s is already captured" % snapshot_id)
        making = final + ".making"
        shutil.rmtree(making, ignore_errors=True)
        os.makedirs(os.path.join(making, "layers"))
        # A copy, not links: the instance goes on writing its layer.
        _run(["cp", "-a", os.path.join(volume, "upper"), os.path.join(making, "layers", "0")])
        below = os.path.join(volume, "image")
        for number, name in enumerate(sorted(os.listdir(below), key=int), start=1):
            _run(["cp", "-al", os.path.join(below, name), os.path.join(making, "layers", str(number))])
        os.rename(making, final)
        return {"captured": True, "layers": _layers_of(final)}

    def forget(self, snapshot_id):
        """Removes a snapshot's layers (its instances keep their links)."""
        found = _snapshot(self.work, snapshot_id)
        there = os.path.isdir(found)
        shutil.rmtree(found, ignore_errors=True)
        return there

    def _end(self, host):
        subprocess.run(["ip", "link", "del", host.bridge_end], capture_output=True)
        subprocess.run(["ip", "neigh", "flush", "to", host.ip], capture_output=True)
        if host.process is None:
            return
        # Its PID 1 first: unshare reaps it and exits, and a PID 1 gone is
        # every process of the host gone.
        for pid in (host.pid, host.process.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if pid == host.pid:
                    try:
                        host.process.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
        host.process.wait()

    def stop_all(self):
        self.stop(list(self.hosts))


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        manager = self.server.manager
        try:
            request = json.loads(self.rfile.readline() or b"{}")
            op = request.get("op")
            if op == "start":
                answer = {"ok": True, "hosts": manager.start(request.get("hosts") or [])}
            elif op == "stop":
                stopped = manager.stop(request.get("ids") or [], bool(request.get("keep_volumes")))
                answer = {"ok": True, "stopped": stopped}
            elif op == "capture":
                answer = {"ok": True, **manager.capture(request.get("id"), request.get("snapshot"))}
            elif op == "forget":
                answer = {"ok": True, "forgot": manager.forget(request.get("snapshot"))}
            elif op == "daemon":
                answer = {"ok": True, "host": manager.daemon(request.get("id"), request)}
            elif op == "list":
                answer = {"ok": True, "hosts": [h.describe() for h in manager.hosts.values()]}
            else:
                answer = {
                    "ok": False,
                    "error": "unknown op %r (start, stop, daemon, list, capture, forget)" % op,
                }
        except Failed as e:
            answer = {"ok": False, "error": str(e)}
        except (ValueError, AttributeError, TypeError) as e:
            answer = {"ok": False, "error": "bad request: %s" % e}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--bridge", default="flowbr0")
    args = parser.parse_args()
    manager = Manager(args.work, args.bridge)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    # One request at a time, on this thread: the hosts' unshare processes
    # die with the thread that started them (setpriv --pdeathsig), so that
    # thread is the one that lives as long as the manager.
    server = socketserver.UnixStreamServer(args.socket, Handler)
    server.manager = manager

    def end(*_):
        manager.stop_all()
        try:
            os.unlink(args.socket)
        except OSError:
            pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    try:
        server.serve_forever()
    finally:
        manager.stop_all()


if __name__ == "__main__":
    main()
