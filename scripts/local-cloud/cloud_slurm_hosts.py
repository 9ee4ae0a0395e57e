"""A Slurm cluster across local hosts: one head node running munged and
slurmctld, compute nodes running munged and slurmd, all instances that are
hosts (cloud_hosts.py, scripts/local-cloud/hosts/manager.py). Nothing here
runs unless FLOW_LOCAL_HOSTS names a host manager; install() does nothing
(the cluster modules call start_cluster when their nodes boot).

How other modules of the local cloud call it (in moto's process, once the
instances are running, so their hosts are up):

    import cloud_slurm_hosts
    if cloud_slurm_hosts.enabled():
        cluster = cloud_slurm_hosts.start_cluster(
            "mycluster",                 # ClusterName (letters, digits, -, _)
            head_instance_id,            # runs munged + slurmctld
            [compute_id, ...],           # each runs munged + slurmd
            partition="compute")         # PartitionName (Default=YES)
        # -> {"name", "dir", "conf", "head": HOST, "nodes": [{"name",
        #     "hostname", "ip", "id"}], "up_s"}; it returns once `sinfo` on
        #     the head shows every node idle, else raises SlurmHostsError
        #     naming the nodes not idle and the daemons' log tails.
    cloud_slurm_hosts.stop_cluster("mycluster")  # forget it (files stay
        # until the manager's work folder goes; daemons end with hosts)

- ParallelCluster (cloud_pcluster_head_node.py's HEAD_NODE_HOOKS): append
  a function (account, region, cluster, head_id) that finds the stack's
  compute instances (tag `parallelcluster:node-type = Compute`) and calls
  start_cluster(cluster, head_id, compute_ids, partition=QUEUE).
- A cluster is made once over its hosts: start_cluster refuses a host
  that already runs munged, slurmctld or slurmd (SlurmHostsError).
- Growing or shrinking a running cluster (a HyperPod count change or node
  replacement): set_computes(name, compute_ids) rewrites slurm.conf and
  /etc/hosts with exactly those compute nodes, starts munged and slurmd on
  the new ones, and restarts slurmctld and the slurmd of every node that
  stays, each by the PID in its pid file ("The slurmctld daemon and all
  slurmd daemons must also be restarted if nodes are added to or removed
  from the cluster", scontrol(1), reconfigure, Slurm 22.05 of Debian 12);
  it returns once sinfo shows every new node idle and every other one
  answering. Nodes that stay keep their state (a drained node stays
  drained: slurmctld restores it from StateSaveLocation) and their jobs
  (slurmstepd outlives a slurmd restart). A host that leaves is the
  caller's to stop, after the call.
- Moving a node to a new host under its own name (ParallelCluster's
  replacement of a static node): move_node(name, node_name, new_id).
- HyperPod (cloud_hyperpod.py's NODES seam, set_node_backend): a node
  backend whose launch(cluster, group, node) starts a host with the
  manager's "start" op (id = node.instance_id, an address of the
  cluster's subnet, hostname ip-A-B-C-D.ec2.internal; HyperPod nodes take
  no key pair) and sets node.private_ip and node.hostname; once every
  group's nodes are launched (len(cluster.nodes) = the sum of the groups'
  TargetCount), it calls start_cluster(cluster.cluster_name, the
  controller group's node id, [the worker groups' node ids]). The ids
  start_cluster takes are the manager's host ids: an EC2 instance's id, or
  whatever id the backend gave the manager.

From outside moto (a test, a shell under scripts/local-hosts), the same:

    FLOW_LOCAL_HOSTS=… python3 cloud_slurm_hosts.py up NAME HEAD_ID COMPUTE_ID…

prints the cluster's JSON (as start_cluster returns it) on one line.

What is made, on the hosts' own views of the file system (each host has
its own mount namespace, /run and root volume over /etc, /usr, /var and
the other system folders, hosts/manager.py; /tmp, where the manager's work
folder is, is the machine's, shared by every host, as a cluster's shared
/home would be):

- One slurm.conf for the cluster, in DIR (the manager's work folder's
  slurm/NAME/etc), bind-mounted over /etc/slurm in every host (each
  slurmd's spool in its host's own /run, /run/slurmd-spool: a job step's
  socket there is named after its node, and a Unix socket's path is at
  most 108 bytes, which a folder under the work folder and a node name
  such as ParallelCluster's `compute-gpu-st-distributed-ml-1` twice
  exceed), so that
  sbatch, srun and sinfo in an SSH session find it where Debian's Slurm
  looks: SlurmctldHost = the head's short hostname (its IP as the
  address); a NodeName per compute host (its short hostname, NodeHostname
  its full one, NodeAddr its IP, CPUs the machine's cores, since hosts
  share them, or 1); one partition of all nodes, the default. Slurm's
  default ports (6817, 6818): each host has its own network namespace.
- One munge key, shared by every munged (each on the default socket
  /run/munge/munge.socket.2 of its own /run).
- An /etc/hosts naming every node of the cluster (full and short
  hostnames), bind-mounted over /etc/hosts in every host.
- Daemons through the manager's "daemon" op (cloud_hosts.run_daemon):
  munged everywhere, slurmctld on the head, `slurmd -N NAME` on each
  compute host; their logs are in DIR/../log and each host's dir.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts"))
import hosts_client as client  # noqa: E402  (hosts/hosts_client.py)

_CLUSTERS = {}
_LOCK = threading.Lock()

MUNGE_SOCKET = "/run/munge/munge.socket.2"

SLURM_CONF = """\
# slurm.conf of local cluster {name} (scripts/local-cloud/cloud_slurm_hosts.py)
ClusterName={name}
SlurmctldHost={head_name}({head_ip})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir=/run/slurmd-spool
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService={return_to_service}
SlurmdTimeout=30
MinJobAge=86400
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/log/jobcomp.txt
{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmHostsError(Exception):
    """The cluster could not be made; its text says what and where to look."""


def enabled():
    """Whether instances are hosts: FLOW_LOCAL_HOSTS names a manager."""
    return client.socket_path() is not None


def _hosts(ids):
    found = {h["id"]: h for h in client.call({"op": "list"})["hosts"]}
    missing = [i for i in ids if i not in found]
    if missing:
        raise SlurmHostsError("no running host for %s" % ", ".join(missing))
    return [found[i] for i in ids]


def _short(hostname):
    return hostname.split(".", 1)[0]


def _enter(host, argv, timeout=30):
    """Runs ARGV in HOST's namespaces; its CompletedProcess."""
    return subprocess.run(
        ["nsenter", "-t", str(host["pid"]), "-n", "-u", "-m", "-p", "--"] + argv,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tail(path, lines=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _layout(name, head, computes, partition, names=None, features=None, return_to_service=2):
    """The cluster's files; each compute host's node is named by NAMES (in
    order) or else by its short hostname, with FEATURES[name] if given."""
    work = os.path.dirname(os.path.dirname(head["dir"]))
    top = os.path.join(work, "slurm", name)
    for sub in ("etc", "state", "spool", "log", "munge"):
        os.makedirs(os.path.join(top, sub), exist_ok=True)
    os.chmod(os.path.join(top, "munge"), 0o700)
    cpus = os.cpu_count() or 1
    nodes = [
        {"name": names[i] if names else _short(h["hostname"]), "hostname": h["hostname"],
         "ip": h["ip"], "id": h["id"]}
        for i, h in enumerate(computes)
    ]
    features = features or {}
    lines = "\n".join(
        "NodeName=%s NodeHostname=%s NodeAddr=%s CPUs=%d State=UNKNOWN%s"
        % (n["name"], n["hostname"], n["ip"], cpus,
           " Feature=%s" % features[n["name"]] if features.get(n["name"]) else "")
        for n in nodes
    )
    conf = os.path.join(top, "etc", "slurm.conf")
    _write(
        conf,
        SLURM_CONF.format(
            name=name,
            head_name=_short(head["hostname"]),
            head_ip=head["ip"],
            dir=top,
            nodes=lines,
            partition=partition,
            return_to_service=return_to_service,
        ),
    )
    etc_hosts = "127.0.0.1\tlocalhost\n" + "".join(
        "%s\t%s %s\n" % (h["ip"], h["hostname"], _short(h["hostname"]))
        for h in [head] + computes
    )
    _write(os.path.join(top, "hosts"), etc_hosts)
    key = os.path.join(top, "munge", "munge.key")
    if not os.path.exists(key):
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    return top, conf, nodes


def _prepare(host, top):
    """The cluster's /etc/hosts and /etc/slurm in HOST's own view."""
    script = (
        "set -e; mount --bind {top}/hosts /etc/hosts; mkdir -p /etc/slurm;"
        " mount --bind {top}/etc /etc/slurm; mkdir -p /run/munge; chmod 755 /run/munge"
    ).format(top=top)
    done = _enter(host, ["sh", "-c", script])
    if done.returncode != 0:
        raise SlurmHostsError(
            "host %s (%s): could not set up /etc/hosts and /etc/slurm: %s"
            % (host["id"], host["ip"], done.stderr.strip())
        )


def _daemon(host, name, argv):
    client.call({"op": "daemon", "id": host["id"], "name": name, "argv": argv, "env": {}})


def _munged(host, top):
    _daemon(
        host,
        "munged",
        ["/usr/sbin/munged", "-F", "--force", "--key-file=%s/munge/munge.key" % top,
         "--pid-file=/run/munge/munged.pid", "--seed-file=%s/munge.seed" % host["dir"],
         "--log-file=%s/munge-file.log" % host["dir"]],
    )


def _wait(what, ready, deadline, why):
    while not ready():
        if time.monotonic() > deadline:
            raise SlurmHostsError("%s did not happen in time: %s" % (what, why()))
        time.sleep(0.05)


def _idle(head, nodes):
    done = _enter(head, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
    states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    return {n["name"]: states.get(n["name"], "missing") for n in nodes}


def start_cluster(name, head_id, compute_ids, partition="compute", timeout_s=60.0,
                  names=None, features=None, return_to_service=2):
    """Makes Slurm cluster NAME over the hosts of HEAD_ID (munged,
    slurmctld) and COMPUTE_IDS (munged, slurmd); returns once sinfo on the
    head shows every node idle (see the module's docstring). NAMES, in the
    order of COMPUTE_IDS, name the nodes (default: their short hostnames);
    FEATURES maps a node's name to its Feature= list; RETURN_TO_SERVICE is
    slurm.conf's ReturnToService (2: a DOWN node returns when it answers;
    1, ParallelCluster's: only a node DOWN for not answering does)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name or ""):
        raise SlurmHostsError("a cluster name is letters, digits, - and _: %r" % (name,))
    if not compute_ids:
        raise SlurmHostsError("cluster %s has no compute nodes" % name)
    began = time.monotonic()
    deadline = began + timeout_s
    with _LOCK:
        head, *computes = _hosts([head_id] + list(compute_ids))
        for host in [head] + computes:
            running = set(host.get("daemons") or []) & {"munged", "slurmctld", "slurmd"}
            if running:
                raise SlurmHostsError(
                    "host %s (%s) already runs %s: a cluster is made once over its hosts"
                    % (host["id"], host["ip"], ", ".join(sorted(running)))
                )
        top, conf, nodes = _layout(name, head, computes, partition, names, features,
                                   return_to_service)
        everyone = [head] + computes
        for host in everyone:
            _prepare(host, top)
        for host in everyone:
            _munged(host, top)
        for host in everyone:
            socket_file = "/proc/%d/root%s" % (host["pid"], MUNGE_SOCKET)
            _wait(
                "munged on %s (%s)" % (host["hostname"], host["ip"]),
                lambda: os.path.exists(socket_file),
                deadline,
                lambda: _tail(os.path.join(host["dir"], "munged.log"))
                + _tail(os.path.join(host["dir"], "munge-file.log")),
            )
        _daemon(head, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"])
        for host, node in zip(computes, nodes):
            _daemon(host, "slurmd", ["/usr/sbin/slurmd", "-D", "-N", node["name"]])
        states = {}

        def all_idle():
            states.update(_idle(head, nodes))
            return all(s == "idle" for s in states.values())

        _wait(
            "every node of cluster %s idle" % name,
            all_idle,
            deadline,
            lambda: "%s; slurmctld.log: %s"
            % (
                ", ".join("%s %s" % kv for kv in sorted(states.items()) if kv[1] != "idle"),
                _tail(os.path.join(top, "log", "slurmctld.log")),
            ),
        )
        cluster = {
            "name": name,
            "dir": top,
            "conf": conf,
            "head": head,
            "nodes": nodes,
            "partition": partition,
            "features": dict(features or {}),
            "return_to_service": return_to_service,
            "up_s": round(time.monotonic() - began, 3),
        }
        _CLUSTERS[name] = cluster
        return cluster


def _restart(host, name, argv, deadline):
    """Ends daemon NAME of HOST (by /run/NAME.pid, in the host's own PID
    namespace), waits until it is gone, and starts it again with ARGV."""
    stop = ("pid=$(cat /run/%s.pid 2>/dev/null) || exit 0; kill \"$pid\" 2>/dev/null || exit 0;"
            " while kill -0 \"$pid\" 2>/dev/null; do sleep 0.05; done" % name)
    done = _enter(host, ["sh", "-c", stop], timeout=max(1.0, deadline - time.monotonic()))
    if done.returncode != 0:
        raise SlurmHostsError("stopping %s on %s: %s" % (name, host["hostname"], done.stderr.strip()))
    _daemon(host, name, argv)


def set_computes(name, compute_ids, timeout_s=90.0):
    """Makes the compute nodes of running cluster NAME exactly COMPUTE_IDS
    (see the module's docstring); returns the cluster, as start_cluster."""
    deadline = time.monotonic() + timeout_s
    with _LOCK:
        cluster = _CLUSTERS.get(name)
        if cluster is None:
            raise SlurmHostsError("no running Slurm cluster %s" % name)
        if not compute_ids:
            raise SlurmHostsError("cluster %s would have no compute nodes" % name)
        had = {n["id"] for n in cluster["nodes"]}
        head = cluster["head"]
        computes = _hosts(list(compute_ids))
        top, conf, nodes = _layout(name, head, computes, cluster["partition"])
        joining = [(h, n) for h, n in zip(computes, nodes) if h["id"] not in had]
        for host, _ in joining:
            _prepare(host, top)
            _munged(host, top)
        for host, _ in joining:
            socket_file = "/proc/%d/root%s" % (host["pid"], MUNGE_SOCKET)
            _wait("munged on %s (%s)" % (host["hostname"], host["ip"]),
                  lambda: os.path.exists(socket_file), deadline,
                  lambda: _tail(os.path.join(host["dir"], "munge-file.log")))
        _restart(head, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"], deadline)
        for host, node in zip(computes, nodes):
            argv = ["/usr/sbin/slurmd", "-D", "-N", node["name"]]
            if host["id"] in had:
                _restart(host, "slurmd", argv, deadline)
            else:
                _daemon(host, "slurmd", argv)
        fresh = {n["name"] for _, n in joining}
        states = {}

        def joined():
            states.update(_idle(head, nodes))
            return all(s == "idle" if n in fresh else not (s.endswith("*") or s in ("missing", "unknown"))
                       for n, s in states.items())

        _wait("the new nodes of cluster %s idle, the others answering" % name, joined, deadline,
              lambda: "%s; slurmctld.log: %s" % (
                  ", ".join("%s %s" % kv for kv in sorted(states.items()) if kv[1] != "idle"),
                  _tail(os.path.join(top, "log", "slurmctld.log"))))
        cluster["nodes"] = nodes
        return cluster


def move_node(name, node_name, new_id, timeout_s=60.0):
    """Puts node NODE_NAME of running cluster NAME on the host of NEW_ID,
    its name kept (ParallelCluster's replacement of a static node: see
    cloud_pcluster_static.py): the node's NodeAddr and NodeHostname in
    slurm.conf and its line in /etc/hosts become the new host's, the new
    host gets the cluster's files and munged, and `slurmd -N NODE_NAME`
    starts there. slurmctld is not restarted: the caller tells it the new
    address with `scontrol update NodeName=… NodeAddr=… NodeHostname=…`
    first, as ParallelCluster does. (slurm.conf is rewritten too because
    Debian's slurmd, built for multiple slurmd, listens on the NodeAddr
    slurm.conf gives its node.) Returns the node's new entry."""
    deadline = time.monotonic() + timeout_s
    with _LOCK:
        cluster = _CLUSTERS.get(name)
        if cluster is None:
            raise SlurmHostsError("no running Slurm cluster %s" % name)
        names = [n["name"] for n in cluster["nodes"]]
        if node_name not in names:
            raise SlurmHostsError("cluster %s has no node %s" % (name, node_name))
        (new,) = _hosts([new_id])
        found = {h["id"]: h for h in client.call({"op": "list"})["hosts"]}
        computes = [
            new if n["name"] == node_name else found.get(n["id"]) or {
                "hostname": n["hostname"], "ip": n["ip"], "id": n["id"]}
            for n in cluster["nodes"]
        ]
        top, conf, nodes = _layout(name, cluster["head"], computes, cluster["partition"],
                                   names, cluster.get("features"),
                                   cluster.get("return_to_service", 2))
        _prepare(new, top)
        _munged(new, top)
        socket_file = "/proc/%d/root%s" % (new["pid"], MUNGE_SOCKET)
        _wait("munged on %s (%s)" % (new["hostname"], new["ip"]),
              lambda: os.path.exists(socket_file), deadline,
              lambda: _tail(os.path.join(new["dir"], "munge-file.log")))
        _daemon(new, "slurmd", ["/usr/sbin/slurmd", "-D", "-N", node_name])
        cluster["nodes"] = nodes
        return next(n for n in nodes if n["name"] == node_name)


def stop_cluster(name):
    """Forgets cluster NAME (its daemons end with their hosts)."""
    with _LOCK:
        return _CLUSTERS.pop(name, None)


def install():
    """Nothing to patch: start_cluster is called by the cluster modules
    (ParallelCluster, HyperPod), and only while hosts are enabled."""
    return None


def main(argv):
    if len(argv) < 4 or argv[0] != "up":
        print("usage: cloud_slurm_hosts.py up NAME HEAD_ID COMPUTE_ID...", file=sys.stderr)
        return 2
    try:
        cluster = start_cluster(argv[1], argv[2], argv[3:])
    except (SlurmHostsError, client.HostError) as e:
        print("cloud_slurm_hosts: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(cluster))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
