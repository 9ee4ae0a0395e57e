#!/usr/bin/env python3
"""Refresh benchmark for flow; prints its figures.

Applies a workflow of 1,000 AWS-backed steps (400 Secrets Manager secrets,
400 S3 buckets, 200 CloudFormation stacks) against a local moto server, then
times, in the same run:

1. `flow plan` (refresh on: every object is read, --parallelism 16);
2. `flow plan --refresh=false` (the offline plan, for the refresh's share);
3. the loop a runbook would use: one `aws ... describe-*` per object, one
   after another (`aws secretsmanager describe-secret`, `aws s3api
   head-bucket`, `aws cloudformation describe-stacks`).

Target: flow's refreshing plan at least 8x faster than the CLI loop.

Usage: bench/refresh.py [--flow PATH] [--objects N] [--cli-sample N]
       bench/refresh.py --throttle [--rate R] [--burst B] [--objects N]
--throttle times the refresh of N secrets under an API rate limit instead
(bench/refresh_throttle.py says what it judges).
Builds the release binary first unless --flow is given. Runs itself under
scripts/local-aws (moto on a free loopback port). The AWS CLI is the one on
PATH, else it is installed into .venv/bench-cli once. --cli-sample N times
the CLI on every (N/1000)th object only and scales the figure (default: all).
Prints the table of what it judged and exits 1 when a figure misses its
target (bench/judge.py).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from judge import Judge
from refresh_throttle import table as throttle_table, throttled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = '{"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}\n'


def workflow(n):
    secrets, buckets = n * 2 // 5, n * 2 // 5
    stacks = n - secrets - buckets
    out = ['[workflow]\nname = "bench-refresh"\nregion = "us-east-1"\n']
    objects = []
    for i in range(secrets):
        out.append(f'[steps.secret{i}]\nprovider = "secretsmanager.secret"\n'
                   f'[steps.secret{i}.inputs]\nname = "bench-secret-{i}"\nvalue = "v{i}"\n')
        objects.append(("secret", f"bench-secret-{i}"))
    for i in range(buckets):
        out.append(f'[steps.bucket{i}]\nprovider = "s3.bucket"\n'
                   f'[steps.bucket{i}.inputs]\nname = "bench-bucket-{i}"\n')
        objects.append(("bucket", f"bench-bucket-{i}"))
    for i in range(stacks):
        out.append(f'[steps.stack{i}]\nprovider = "cloudformation.stack"\n'
                   f'[steps.stack{i}.inputs]\nstack_name = "bench-stack-{i}"\ntemplate = "t.json"\n')
        objects.append(("stack", f"bench-stack-{i}"))
    return "".join(out), objects


def aws_cli():
    found = shutil.which("aws")
    if found:
        return found
    venv = os.path.join(ROOT, ".venv", "bench-cli")
    aws = os.path.join(venv, "bin", "aws")
    if not os.path.exists(aws):
        print("installing the AWS CLI into .venv/bench-cli (once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "awscli"], check=True)
    return aws


def cli_command(aws, kind, name):
    if kind == "secret":
        return [aws, "secretsmanager", "describe-secret", "--secret-id", name]
    if kind == "bucket":
        return [aws, "s3api", "head-bucket", "--bucket", name]
    return [aws, "cloudformation", "describe-stacks", "--stack-name", name]


def timed(cmd, cwd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "NO_COLOR": "1"})
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 2):
        sys.exit(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return wall, proc.stdout


def inner(flow, n, sample):
    d = tempfile.mkdtemp(prefix="flow-bench-refresh-")
    try:
        text, objects = workflow(n)
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(text)
        with open(os.path.join(d, "t.json"), "w") as f:
            f.write(TEMPLATE)
        setup, out = timed([flow, "apply", "wf.toml", "--auto-approve", "-q", "--parallelism", "32"], d)
        if f"{n} created" not in out:
            sys.exit(f"unexpected apply output:\n{out}")
        plans = sorted(timed([flow, "plan", "wf.toml", "--detailed-exitcode"], d)[0] for _ in range(3))
        offline = sorted(timed([flow, "plan", "wf.toml", "--refresh=false"], d)[0] for _ in range(3))
        aws = aws_cli()
        step = max(1, n // sample) if sample else 1
        chosen = objects[::step]
        start = time.perf_counter()
        for kind, name in chosen:
            proc = subprocess.run(cli_command(aws, kind, name), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"})
            if proc.returncode != 0:
                sys.exit(f"aws {kind} {name} failed: {proc.stderr}")
        cli = (time.perf_counter() - start) * len(objects) / len(chosen)
        plan = plans[1]
        print(f"refresh of {n} AWS-backed steps ({n * 2 // 5} secrets, {n * 2 // 5} buckets, "
              f"{n - 2 * (n * 2 // 5)} stacks) against moto; apply took {setup:.1f} s")
        print(f"  flow plan (refresh, 16 at once)   median {plan:.2f} s  (runs: {', '.join(f'{p:.2f}' for p in plans)})")
        print(f"  flow plan --refresh=false         median {offline[1]:.2f} s")
        print(f"  refresh's share                   {plan - offline[1]:.2f} s")
        what = "every object" if step == 1 else f"{len(chosen)} objects, scaled to {len(objects)}"
        print(f"  aws CLI loop, one describe each   {cli:.1f} s  ({what}; {os.path.basename(aws)} {cli_version(aws)})")
        ratio = cli / plan
        print(f"  CLI loop / flow plan              {ratio:.1f}x")
        judge = Judge("refresh")
        judge.at_least(f"refresh of {n:,} objects: aws CLI loop / flow plan", ratio, 8, "{:.1f}", "x")
        judge.note(f"refresh of {n:,} objects: flow plan", f"{plan:.2f} s")
        judge.finish()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def cli_version(aws):
    out = subprocess.run([aws, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    return out.split()[0] if out else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--cli-sample", type=int, default=0)
    ap.add_argument("--throttle", action="store_true",
                    help="refresh N secrets under an API rate limit (bench/refresh_throttle.py)")
    ap.add_argument("--rate", type=float, default=100, help="--throttle: DescribeSecret calls a second")
    ap.add_argument("--burst", type=float, default=100, help="--throttle: the bucket's size")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    flow = os.path.abspath(args.flow) if args.flow else None
    if not flow:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(target, "release", "flow")
    if args.inner:
        print(f"machine: {os.cpu_count()} cores; flow: {flow}\n")
        if args.throttle:
            throttled(flow, args.objects, args.rate, args.burst)
        else:
            inner(flow, args.objects, args.cli_sample)
        return
    cmd = [os.path.join(ROOT, "scripts", "local-aws"), sys.executable, os.path.abspath(__file__),
           "--inner", "--flow", flow, "--objects", str(args.objects), "--cli-sample", str(args.cli_sample)]
    env = dict(os.environ)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="flow-throttle-") as t:
        if args.throttle:
            # The latency model (scripts/local-cloud/latency_model.py) with
            # the throttle row alone, on.
            t.write(throttle_table(args.rate, args.burst))
            t.flush()
            env.update(FLOW_LATENCY_MODEL=t.name, FLOW_LATENCY_THROTTLE="1")
            cmd += ["--throttle", "--rate", str(args.rate), "--burst", str(args.burst)]
        sys.exit(subprocess.run(cmd, env=env).returncode)


if __name__ == "__main__":
    main()
