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

HOST is {"id", "ip", "hostname", "user", "pid" (the host's PID 1, in the
manager's PID namespace: enter the host with `nsenter -t PID -n -u -m -p`),
"netns" ("/proc/PID/ns/net"), "dir" (its files: sshd.log, DAEMON.log),
"host_key" (the host's public key, made for this host on this run),
"daemons" ([names]), "start_s" (seconds from the request to sshd
accepting)}. A start is answered once sshd accepts TCP on the address.

Run: python3 manager.py --socket PATH --work DIR --bridge flowbr0
"""

import argparse
import ipaddress
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOST_INIT = os.path.join(HERE, "host-init")

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
        }


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
            self.count += 1
            new.append(Host(spec, self.count, self.work))
        try:
            self._boot(new, specs, began, limit_s)
        except BaseException:
            for host in new:
                self._end(host)
            raise
        for host in new:
            self.hosts[host.id] = host
        return [h.describe() for h in new]

    def _boot(self, new, specs, began, limit_s):
        keygens = []
        for host in new:
            os.makedirs(os.path.join(host.dir, "home", host.user), exist_ok=True)
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

    def stop(self, ids):
        stopped = []
        for host_id in ids:
            host = self.hosts.pop(host_id, None)
            if host is not None:
                self._end(host)
                stopped.append(host_id)
        return stopped

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
                answer = {"ok": True, "stopped": manager.stop(request.get("ids") or [])}
            elif op == "daemon":
                answer = {"ok": True, "host": manager.daemon(request.get("id"), request)}
            elif op == "list":
                answer = {"ok": True, "hosts": [h.describe() for h in manager.hosts.values()]}
            else:
                answer = {"ok": False, "error": "unknown op %r (start, stop, daemon, list)" % op}
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
