#!/usr/bin/env python3
"""slurm.job latency benchmark for flow; prints its figures.

Against a local one-node Slurm (Debian's slurmctld/slurmd/munge, started by
scripts/local-slurm), runs a trivial batch job N times each way:

1. `flow apply` of a workflow with one slurm.job step (submit, follow,
   judge, record), timed from the command's start to its exit;
2. `sbatch --wait` of the same script, Slurm's own way of waiting.

For each flow run it also takes:
- Slurm's own span, SubmitTime to EndTime (`scontrol show job`, 1 s
  resolution), so flow's overhead over it is wall - span;
- the extra wait after the job's last command: the job writes a
  nanosecond timestamp as its last act, and flow's exit is compared with it
  (this covers Slurm noticing the end, flow's poll, and recording).

Target: the extra wait after completion stays under 2 s.

Usage: bench/slurm-job.py [--flow PATH] [--runs N]
Builds the release binary first unless --flow is given; runs itself under
scripts/local-slurm when SLURM_CONF is not set.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

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
    walls, spans, extras, waits = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="flow-bench-slurm") as d:
        stamp = os.path.join(d, "stamp")
        with open(os.path.join(d, "job.sbatch"), "w") as f:
            f.write(SCRIPT)
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(WORKFLOW.format(stamp=stamp))
        for i in range(args.runs):
            subprocess.run([flow, "destroy", "--auto-approve", "wf.toml"], cwd=d,
                           capture_output=True, check=True)
            start = time.time()
            subprocess.run([flow, "apply", "--auto-approve", "wf.toml"], cwd=d,
                           capture_output=True, check=True)
            end = time.time()
            job_id = subprocess.run([flow, "output", "wf.toml", "job.job_id"], cwd=d,
                                    capture_output=True, text=True, check=True).stdout.strip()
            with open(stamp) as f:
                last = float(f.read())
            walls.append(end - start)
            spans.append(scontrol_span(job_id))
            extras.append(end - last)
        env = dict(os.environ, STAMP=stamp)
        for i in range(args.runs):
            start = time.time()
            subprocess.run(["sbatch", "--wait", "--export=ALL", "job.sbatch"], cwd=d,
                           capture_output=True, check=True, env=env)
            waits.append(time.time() - start)

    def fig(xs):
        return f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"

    print(f"runs: {args.runs}, one node, trivial job")
    print(f"flow apply, submit to recorded:        {fig(walls)}")
    print(f"Slurm's span, SubmitTime to EndTime:   {fig(spans)}  (1 s resolution)")
    print(f"flow's overhead over Slurm's span:     {fig([w - s for w, s in zip(walls, spans)])}")
    print(f"extra wait after the job's last command: {fig(extras)}  (target < 2 s)")
    print(f"sbatch --wait of the same script:      {fig(waits)}")
    print(f"ratio flow apply / sbatch --wait:      {statistics.median(walls) / statistics.median(waits):.2f}")
    if max(extras) >= 2.0:
        print("TARGET MISSED: an extra wait reached 2 s", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
