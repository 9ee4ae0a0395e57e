#!/usr/bin/env python3
"""slurm.job latency benchmark for flow; prints its figures.

Against a local one-node Slurm (Debian's slurmctld/slurmd/munge, started by
scripts/local-slurm), runs a trivial batch job N times each way:

1. `flow apply` of a workflow with one slurm.job step (submit, follow,
   judge, record), timed from the command's start to its exit;
2. `flow apply` of the same step over SSH: submitted on a "head node" (a
   throwaway sshd the benchmark starts on loopback, generated keys, whose
   sessions reach the same Slurm), where each poll is one `ssh` connection
   for `scontrol` and one for the output file;
3. `sbatch --wait` of the same script, Slurm's own way of waiting.

For each flow run it also takes:
- Slurm's own span, SubmitTime to EndTime (`scontrol show job`, 1 s
  resolution), so flow's overhead over it is wall - span;
- the extra wait after the job's last command: the job writes a
  nanosecond timestamp as its last act, and flow's exit is compared with it
  (this covers Slurm noticing the end, flow's poll, and recording).

It also times one poll's command alone, 20 times each: `scontrol show job
-o ID` here, over a new `ssh` connection each time, and over one shared
connection (a ControlMaster, as flow runs a step's commands).

Target: the extra wait after completion stays under 2 s, here and over SSH.

Usage: bench/slurm-job.py [--flow PATH] [--runs N]
Builds the release binary first unless --flow is given; runs itself under
scripts/local-slurm when SLURM_CONF is not set.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from judge import Judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = """#!/bin/bash
#SBATCH --job-name=bench-trivial
#SBATCH --output=bench_%j.out
echo "trivial job $SLURM_JOB_ID"
date +%s.%N > "$STAMP"
"""
WORKFLOW = """[workflow]
name = "bench-slurm"

[steps.job]
provider = "slurm.job"
[steps.job.inputs]
script = "job.sbatch"
environment = {{ STAMP = "{stamp}" }}
success_pattern = "trivial job"
"""
SSH_INPUTS = """host = "127.0.0.1"
ssh_port = {port}
ssh_private_key = "${{vars.ssh_key}}"
ssh_host_key = "{host_key}"
chdir = "{chdir}"

[vars.ssh_key]
sensitive = true
env = "BENCH_SSH_KEY"
"""


def start_sshd(d):
    """A throwaway sshd on a free loopback port that lets a generated key in
    and gives its sessions this SLURM_CONF; (process, port, key, host key)."""
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench",
                        "-f", os.path.join(d, name)], check=True)
    with open(os.path.join(d, "client_key.pub")) as src, \
            open(os.path.join(d, "authorized_keys"), "w") as dst:
        dst.write(src.read())
    os.makedirs("/run/sshd", exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    conf = os.path.join(d, "sshd_config")
    with open(conf, "w") as f:
        f.write(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
                f"AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
                f"SetEnv SLURM_CONF={os.environ['SLURM_CONF']}\n")
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", conf],
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    with open(os.path.join(d, "client_key")) as f:
        key = f.read()
    with open(os.path.join(d, "host_key.pub")) as f:
        host_key = f.read().strip()
    return proc, port, key, host_key


def applies(flow, d, runs, stamp, env=None):
    """`flow apply` of wf.toml in d, `runs` times: (walls, spans, extras)."""
    walls, spans, extras = [], [], []
    for _ in range(runs):
        subprocess.run([flow, "destroy", "--auto-approve", "wf.toml"], cwd=d,
                       capture_output=True, check=True, env=env)
        start = time.time()
        subprocess.run([flow, "apply", "--auto-approve", "wf.toml"], cwd=d,
                       capture_output=True, check=True, env=env)
        end = time.time()
        job_id = subprocess.run([flow, "output", "wf.toml", "job.job_id"], cwd=d,
                                capture_output=True, text=True, check=True,
                                env=env).stdout.strip()
        with open(stamp) as f:
            last = float(f.read())
        walls.append(end - start)
        spans.append(scontrol_span(job_id))
        extras.append(end - last)
    return walls, spans, extras


def timed(argv, n=20):
    """Seconds each of n runs of argv took."""
    out = []
    for _ in range(n):
        start = time.time()
        subprocess.run(argv, capture_output=True, check=True)
        out.append(time.time() - start)
    return out


def scontrol_span(job_id):
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id],
                         capture_output=True, text=True, check=True).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    fmt = "%Y-%m-%dT%H:%M:%S"
    return (time.mktime(time.strptime(fields["EndTime"], fmt))
            - time.mktime(time.strptime(fields["SubmitTime"], fmt)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flow")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        os.execvp(os.path.join(ROOT, "scripts/local-slurm"),
                  [os.path.join(ROOT, "scripts/local-slurm"), sys.executable] + sys.argv)
    flow = args.flow
    if not flow:
        env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")))
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True, env=env)
        flow = os.path.join(env["CARGO_TARGET_DIR"], "release", "flow")
    waits = []
    with tempfile.TemporaryDirectory(prefix="flow-bench-slurm") as d:
        stamp = os.path.join(d, "stamp")
        with open(os.path.join(d, "job.sbatch"), "w") as f:
            f.write(SCRIPT)
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(WORKFLOW.format(stamp=stamp))
        walls, spans, extras = applies(flow, d, args.runs, stamp)
        env = dict(os.environ, STAMP=stamp)
        for i in range(args.runs):
            start = time.time()
            subprocess.run(["sbatch", "--wait", "--export=ALL", "job.sbatch"], cwd=d,
                           capture_output=True, check=True, env=env)
            waits.append(time.time() - start)
        job_id = subprocess.run(["sbatch", "--parsable", "--wait", "job.sbatch"], cwd=d,
                                capture_output=True, text=True, check=True,
                                env=env).stdout.strip()
        local_poll = timed(["scontrol", "show", "job", "-o", job_id])

        keys = os.path.join(d, "ssh")
        os.makedirs(keys)
        sshd, port, key, host_key = start_sshd(keys)
        try:
            remote = os.path.join(d, "remote")
            os.makedirs(remote)
            with open(os.path.join(remote, "job.sbatch"), "w") as f:
                f.write(SCRIPT)
            with open(os.path.join(remote, "wf.toml"), "w") as f:
                f.write(WORKFLOW.format(stamp=stamp).replace(
                    "success_pattern", SSH_INPUTS.format(
                        port=port, host_key=host_key, chdir=remote).split("[vars")[0]
                    + "success_pattern")
                    + "\n[vars" + SSH_INPUTS.split("[vars")[1])
            ssh_env = dict(os.environ, BENCH_SSH_KEY=key)
            ssh_walls, ssh_spans, ssh_extras = applies(flow, remote, args.runs, stamp, ssh_env)
            ssh = ["ssh", "-i", os.path.join(keys, "client_key"), "-p", str(port),
                   "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                   "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
            poll = ["127.0.0.1", "scontrol", "show", "job", "-o", job_id]
            ssh_poll = timed(ssh + poll)
            # Through one shared connection, as flow runs a step's commands.
            shared = ssh + ["-o", f"ControlPath={keys}/cm"]
            subprocess.run(shared + ["-M", "-N", "-f", "127.0.0.1"], check=True)
            try:
                shared_poll = timed(shared + poll)
            finally:
                subprocess.run(shared + ["-O", "exit", "127.0.0.1"], capture_output=True)
        finally:
            sshd.terminate()
            sshd.wait()

    def fig(xs):
        return f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"

    def ms(xs):
        return f"median {statistics.median(xs) * 1000:.1f} ms (min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f})"

    print(f"runs: {args.runs}, one node, trivial job")
    print(f"flow apply, submit to recorded:        {fig(walls)}")
    print(f"Slurm's span, SubmitTime to EndTime:   {fig(spans)}  (1 s resolution)")
    print(f"flow's overhead over Slurm's span:     {fig([w - s for w, s in zip(walls, spans)])}")
    print(f"extra wait after the job's last command: {fig(extras)}  (target < 2 s)")
    print(f"sbatch --wait of the same script:      {fig(waits)}")
    print(f"ratio flow apply / sbatch --wait:      {statistics.median(walls) / statistics.median(waits):.2f}")
    print("over SSH (a throwaway sshd on loopback):")
    print(f"  flow apply, submit to recorded:      {fig(ssh_walls)}")
    print(f"  flow's overhead over Slurm's span:   {fig([w - s for w, s in zip(ssh_walls, ssh_spans)])}")
    print(f"  extra wait after the last command:   {fig(ssh_extras)}  (target < 2 s)")
    print(f"one poll's scontrol, here:             {ms(local_poll)}")
    print(f"one poll's scontrol, over a new ssh connection:    {ms(ssh_poll)}")
    print(f"one poll's scontrol, over a shared ssh connection: {ms(shared_poll)}")
    print(f"ratio new connection / shared:         {statistics.median(ssh_poll) / statistics.median(shared_poll):.1f}")
    print(f"ratio shared ssh / here:               {statistics.median(shared_poll) / statistics.median(local_poll):.1f}")
    judge = Judge("slurm-job")
    judge.below("extra wait after the job's last command (max, local)", max(extras), 2, "{:.2f}", " s")
    judge.below("extra wait after the job's last command (max, over SSH)", max(ssh_extras), 2, "{:.2f}", " s")
    judge.note("flow apply / sbatch --wait", f"{statistics.median(walls) / statistics.median(waits):.2f}")
    judge.finish()


if __name__ == "__main__":
    main()
