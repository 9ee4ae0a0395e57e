"""bench/refresh.py --throttle: refresh under an API rate limit.

The local cloud's latency model throttles the one read a secret's refresh
makes (Secrets Manager DescribeSecret) with a token bucket of `burst` tokens
refilled at `rate` a second (scripts/local-cloud/latency_throttle.py),
answering ThrottlingException beyond it, as AWS does. The bench applies N
secrets with the throttle off, switches it on, and times `flow plan` (every
object read, --parallelism 16), judging:

- no failed read: the plan reads every object ("No changes", exit code 0
  under --detailed-exitcode, no "could not read");
- the throttle was met: the model's report counts throttled answers;
- wall <= 1.2 x what the rate allows, (N - burst) / rate: the reads go as
  fast as the limit lets them, the SDK's adaptive back-off neither failing
  them nor waiting much longer than it must.

Why secrets only: Secrets Manager's published rate (40,000 DescribeSecret a
second) would never bind, and a mix of kinds is read in name order (one
kind's reads, then the next), so its time is not one limit's; one kind at a
stated rate is a bound the figure can be judged against. The rate stands in
for a low per-API limit such as EC2's non-mutating bucket (100, 20/s) or
CloudFormation's (unpublished; bench/latency.toml's estimate).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from judge import Judge

SWITCH = "/moto-api/flow-latency/throttle"
REPORT = "/moto-api/flow-latency/report"


def table(rate, burst):
    """The latency model's table for the bench: the throttle row alone."""
    return ("scale = 60\n\n[throttle]\n"
            f'"secretsmanager:DescribeSecret" = {{ rate = {rate}, burst = {burst} }}\n')


def switch(word):
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    req = urllib.request.Request(endpoint + SWITCH, data=word.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as answer:
        assert answer.read().decode() == word


def report():
    import json
    with urllib.request.urlopen(os.environ["AWS_ENDPOINT_URL"] + REPORT, timeout=30) as answer:
        return json.loads(answer.read())


def run(cmd, cwd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "NO_COLOR": "1", "FLOW_TIME_SCALE": "1/60"})
    return time.perf_counter() - start, proc


def throttled(flow, n, rate, burst):
    """Applies n secrets unthrottled, then times the refresh under the limit."""
    d = tempfile.mkdtemp(prefix="flow-bench-refresh-throttle-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write('[workflow]\nname = "bench-refresh-throttle"\nregion = "us-east-1"\n')
            for i in range(n):
                f.write(f'[steps.secret{i}]\nprovider = "secretsmanager.secret"\n'
                        f'[steps.secret{i}.inputs]\nname = "bench-secret-{i}"\nvalue = "v{i}"\n')
        switch("off")
        setup, proc = run([flow, "apply", "wf.toml", "--auto-approve", "-q", "--parallelism", "32"], d)
        if proc.returncode != 0 or f"{n} created" not in proc.stdout:
            sys.exit(f"apply failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        before = report()
        switch("on")
        wall, proc = run([flow, "plan", "wf.toml", "--detailed-exitcode"], d)
        after = report()
        out = proc.stdout + proc.stderr
        sent = after["calls"].get("DescribeSecret", 0) - before["calls"].get("DescribeSecret", 0)
        refused = after["throttled"].get("DescribeSecret", 0)
        allowed = max(0, n - burst) / rate
        unread = out.lower().count("could not read")
        print(f"refresh of {n} secrets, DescribeSecret limited to {rate:g}/s (burst {burst:g}); "
              f"apply (unthrottled) took {setup:.1f} s")
        print(f"  flow plan (refresh, 16 at once)   {wall:.2f} s, exit {proc.returncode}")
        print(f"  DescribeSecret sent               {sent} ({refused} throttled, {sent - refused} answered)")
        print(f"  what the rate allows              {allowed:.2f} s  ((N - burst) / rate)")
        print(f"  wall / allowed                    {wall / allowed if allowed else 0:.3f}")
        judge = Judge("refresh-throttle")
        judge.check(f"refresh of {n:,} throttled objects: failed reads", str(unread), "0",
                    proc.returncode == 0 and unread == 0 and "No changes" in out)
        judge.at_least(f"refresh of {n:,} throttled objects: throttled answers", refused, 1, "{:d}")
        judge.at_most(f"refresh of {n:,} throttled objects: wall / what {rate:g}/s allows",
                      wall / allowed if allowed else 0, 1.2)
        judge.note(f"refresh of {n:,} throttled objects: flow plan", f"{wall:.2f} s")
        if proc.returncode != 0:
            print(out[-3000:])
        judge.finish()
    finally:
        shutil.rmtree(d, ignore_errors=True)
