#!/usr/bin/env python3
"""Reading a state while an apply holds it (issue 42, part 4); prints its figures.

The apply is bench/core.py's: 2,000 `null` steps in 10 layers of 200, each
depending on 3 steps of the layer before, each sleeping 200 ms, with
--parallelism 200. It runs --runs times alone and --runs times with a
reader beside it, alternately, each from an empty state. The reader starts
a read every 100 ms (or as soon as the last one ended, when one took
longer), alternately `flow output FILE` and `flow state list FILE`, for as
long as the apply runs; each read is answered by the apply, from its last
committed change. The three kinds of apply (alone, with the reader, with
the control's reader) alternate.

1. slowdown: median wall time of the applies with the reader over the
   median of those without (target <= 1.02: reading does not slow the
   apply). Beside it, a control: the same reader reading another, applied
   state, which asks nothing of the apply (what the reader's own processes
   cost on the machine's cores), and the apply's own CPU seconds (by
   wait4) alone and with the reader (what answering costs it).
2. reads: how many were answered from the apply (they say so on stderr),
   and how many failed (target 0); the latency of `output` and of
   `state list` while the apply ran (median and 95th percentile; printed,
   no target in the issue), beside the same commands' latency once the
   apply is done (read under the lock, through a private copy).

Usage: bench/read-while-apply.py [--flow PATH] [--runs N] [--steps N]
Builds the release binary first unless --flow is given. The reader's
processes share the machine's cores with the apply: on a machine with few
cores the slowdown counts their CPU time too. Prints the table of what it
judged and exits 1 when a figure misses its target (bench/judge.py).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from core import layered_workflow
from judge import Judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL = 0.100
READS = (["output", "wf.toml"], ["state", "list", "wf.toml"])
SAID = "read while `flow apply` (pid "


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def one_read(flow, args, cwd):
    """(wall seconds, exit code, stderr) of one read."""
    start = time.perf_counter()
    proc = subprocess.run([flow] + args, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"})
    return time.perf_counter() - start, proc.returncode, proc.stderr


def apply_once(flow, steps, reader, control=None):
    """One apply of `steps` steps: its wall and CPU seconds (user + system,
    of the apply's process alone), the reads made beside it (command,
    seconds, answered by the apply?, ok?) and the reads' latency once it is
    done. With `control` (a folder holding an applied state of the same
    workflow), the reader reads that state instead: the same reads, the
    same processes, asking nothing of the apply."""
    layers, fan_in, delay = 10, 3, 200
    width = steps // layers
    d = tempfile.mkdtemp(prefix="flow-bench-rwa-")
    reads = []
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(layered_workflow(layers, width, fan_in, delay))
        lock = os.path.join(d, ".flow", "wf", "lock")
        where = control or d
        done = threading.Event()

        def poll():
            # Until the apply holds the state, there is nothing to read.
            while not done.is_set() and not (os.path.exists(lock) and os.path.getsize(lock) > 0):
                time.sleep(0.005)
            n = 0
            while not done.is_set():
                started = time.perf_counter()
                args = READS[n % 2]
                took, code, err = one_read(flow, args, where)
                if done.is_set() and SAID not in err and not control:
                    break  # the apply ended during this read
                reads.append((args[0], took, SAID in err, code == 0))
                if code != 0:
                    print(f"  a read failed: flow {' '.join(args)}: {err.strip()}", file=sys.stderr)
                n += 1
                time.sleep(max(0.0, POLL - (time.perf_counter() - started)))

        thread = threading.Thread(target=poll) if reader else None
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            proc = subprocess.Popen([flow, "apply", "wf.toml", "--auto-approve", "-q",
                                     "--parallelism", str(width)], cwd=d, stdout=out, stderr=err,
                                    env={**os.environ, "NO_COLOR": "1"})
            if thread:
                thread.start()
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            done.set()
            if thread:
                thread.join()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode()
        if proc.returncode != 0 or f"{steps} created" not in stdout:
            sys.exit(f"the apply failed ({proc.returncode}):\n{stdout}\n{stderr}")
        after = {args[0]: one_read(flow, args, d)[0] for args in READS}
        return wall, usage.ru_utime + usage.ru_stime, reads, after
    finally:
        shutil.rmtree(d, ignore_errors=True)


def applied_copy(flow, steps):
    """A folder holding the workflow and its applied state (the control's)."""
    layers, fan_in, delay = 10, 3, 200
    d = tempfile.mkdtemp(prefix="flow-bench-rwa-control-")
    with open(os.path.join(d, "wf.toml"), "w") as f:
        f.write(layered_workflow(layers, steps // layers, fan_in, delay))
    subprocess.run([flow, "apply", "wf.toml", "--auto-approve", "-q", "--parallelism",
                    str(steps // layers)], cwd=d, check=True, capture_output=True)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--runs", type=int, default=5, help="applies of each kind (alone, read, control)")
    ap.add_argument("--steps", type=int, default=2000, help="steps of the apply, in 10 layers")
    args = ap.parse_args()
    flow = os.path.abspath(args.flow) if args.flow else None
    if not flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(ROOT, "target", "release", "flow")
    print(f"machine: {os.cpu_count()} cores; flow: {flow}\n")
    control = applied_copy(flow, args.steps)
    kinds = {"alone": [], "read": [], "control": []}
    reads, after = [], []
    try:
        for _ in range(args.runs):
            kinds["alone"].append(apply_once(flow, args.steps, reader=False))
            run = apply_once(flow, args.steps, reader=True)
            kinds["read"].append(run)
            reads += run[2]
            after.append(run[3])
            kinds["control"].append(apply_once(flow, args.steps, reader=True, control=control))
    finally:
        shutil.rmtree(control, ignore_errors=True)
    wall = {k: quantile([r[0] for r in v], 0.5) for k, v in kinds.items()}
    cpu = {k: quantile([r[1] for r in v], 0.5) for k, v in kinds.items()}
    ratio, control_ratio = wall["read"] / wall["alone"], wall["control"] / wall["alone"]
    print(f"apply {args.steps} null steps (10 layers, 200 ms each), {args.runs} times each: alone,"
          f" with a reader of its state every {POLL * 1000:.0f} ms, with the same reader of another"
          f" (applied) state")
    for k, v in kinds.items():
        print(f"  {k:<8} wall median {wall[k]:.3f} s (runs: {', '.join(f'{r[0]:.3f}' for r in v)});"
              f" the apply's CPU median {cpu[k]:.2f} s")
    print(f"  wall ratio: reader of its state {ratio:.3f}, reader of another state {control_ratio:.3f}")
    live = [r for r in reads if r[2]]
    failed = [r for r in reads if not r[3]]
    print(f"  reads of its state: {len(reads)}, {len(live)} answered by the apply, {len(failed)} failed")
    judge = Judge("read-while-apply")
    judge.at_most(f"apply {args.steps:,} steps: wall with a reader every 100 ms / without", ratio, 1.02)
    judge.note("the same with the reader reading another state (its processes' share of the cores)",
               f"{control_ratio:.3f}")
    judge.note("the apply's own CPU seconds: alone / with the reader of its state",
               f"{cpu['alone']:.2f} / {cpu['read']:.2f} s")
    judge.check("reads that failed while the apply ran", str(len(failed)), "0", not failed)
    judge.at_least("reads answered by the apply", len(live), 1, fmt="{:d}")
    for cmd in ("output", "state"):
        took = [r[1] for r in live if r[0] == cmd]
        name = "flow output" if cmd == "output" else "flow state list"
        med, p95 = quantile(took, 0.5) * 1000, quantile(took, 0.95) * 1000
        done = quantile([a[cmd] for a in after], 0.5) * 1000
        print(f"  {name:<16} while applying: median {med:.0f} ms, p95 {p95:.0f} ms ({len(took)} reads);"
              f" once done: {done:.0f} ms")
        judge.note(f"{name} while a {args.steps:,}-step apply runs (median / p95)",
                   f"{med:.0f} / {p95:.0f} ms")
        judge.note(f"{name} once it is done (median)", f"{done:.0f} ms")
    judge.finish()


if __name__ == "__main__":
    main()
