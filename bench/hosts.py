"""How many local hosts this machine holds, and how long one takes to start
(issue 39: "Hosts a 2-core machine holds; the time to start one").

    bench/hosts.py            # runs itself under scripts/local-hosts (root)

Through the host manager (scripts/local-cloud/hosts/manager.py), as the
local cloud's moto asks it for an instance's host:
- start time: ten hosts started one at a time (each stopped before the
  next), from the request to sshd accepting on the host's address; the
  median and the slowest;
- hosts held: hosts started eight at a time up to FLOW_BENCH_HOSTS (64),
  then every one of them answers `hostname` over SSH with its own name, and
  all run together; the memory they take (the proportional set size of
  every process in their PID namespaces, per host), and from it how many
  the memory available at the start would hold.
Judged (bench/judge.py): at least 16 hosts held and reached over SSH.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts/local-cloud/hosts"))

from judge import Judge  # noqa: E402

import hosts_client as client  # noqa: E402


def mem_available_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise SystemExit("no MemAvailable in /proc/meminfo")


def hosts_pss_kib(inits):
    """The proportional set size of every process in the hosts' PID
    namespaces (their init, sshd, what they run), summed."""
    namespaces = set()
    for pid in inits:
        try:
            namespaces.add(os.readlink("/proc/%d/ns/pid" % pid))
        except OSError:
            pass
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % entry) not in namespaces:
                continue
            with open("/proc/%s/smaps_rollup" % entry) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def spec(n, public_key):
    ip = "10.99.%d.%d" % (n // 250, 4 + n % 250)
    return {"id": "i-bench%04d" % n, "ip": ip, "hostname": "ip-%s.ec2.internal" % ip.replace(".", "-"),
            "user": "ec2-user", "authorized_keys": public_key}


def main():
    if not client.socket_path():
        os.execvp(os.path.join(ROOT, "scripts/local-hosts"),
                  [os.path.join(ROOT, "scripts/local-hosts"), sys.executable] + sys.argv)
    most = int(os.environ.get("FLOW_BENCH_HOSTS", "64"))
    work = tempfile.mkdtemp(prefix="flow-bench-hosts.")
    key = os.path.join(work, "key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    public_key = open(key + ".pub").read()

    starts = []
    for n in range(10):
        began = time.monotonic()
        client.call({"op": "start", "hosts": [spec(n, public_key)]})
        starts.append(time.monotonic() - began)
        client.call({"op": "stop", "ids": [spec(n, public_key)["id"]]})

    before = mem_available_kib()
    began = time.monotonic()
    held = 0
    error = None
    while held < most:
        batch = [spec(1000 + held + i, public_key) for i in range(min(8, most - held))]
        try:
            client.call({"op": "start", "hosts": batch})
        except client.HostError as e:
            error = str(e)
            break
        held += len(batch)
    all_started_s = time.monotonic() - began
    time.sleep(1)
    running = client.call({"op": "list"})["hosts"]
    pss = hosts_pss_kib([h["pid"] for h in running])
    known = os.path.join(work, "known_hosts")
    with open(known, "w") as f:
        for h in running:
            f.write("%s %s\n" % (h["ip"], h["host_key"]))
    reached = 0
    for n in range(held):
        s = spec(1000 + n, public_key)
        out = subprocess.run(
            ["ssh", "-i", key, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + known,
             "-o", "ConnectTimeout=5", "ec2-user@" + s["ip"], "hostname"],
            capture_output=True, text=True)
        reached += out.stdout.strip() == s["hostname"]
    client.call({"op": "stop", "ids": [spec(1000 + n, public_key)["id"] for n in range(held)]})

    per_host_kib = max(1, pss / max(1, held))
    judge = Judge("hosts")
    judge.note("start one host (median of 10)", "%.3f s" % statistics.median(starts))
    judge.note("start one host (slowest of 10)", "%.3f s" % max(starts))
    judge.note("start %d hosts, 8 at a time" % held, "%.2f s" % all_started_s)
    judge.note("memory per running host (PSS)", "%.1f MiB" % (per_host_kib / 1024))
    judge.note("hosts the memory available at the start would hold", "%d" % (before / per_host_kib))
    if error:
        judge.note("stopped starting at %d hosts" % held, error[:80])
    judge.at_least("hosts held at once, each answering over SSH", reached, 16, "{:.0f}")
    judge.note("hosts asked for", "%d (FLOW_BENCH_HOSTS)" % most)
    judge.note("CPUs, memory", "%d, %.1f GiB" % (os.cpu_count(), before / 1024 / 1024))
    judge.finish()


if __name__ == "__main__":
    main()
