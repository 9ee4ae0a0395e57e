#!/usr/bin/env python3
"""Core engine benchmarks for flow; prints its figures.

1. apply: 2,000 `null` steps in 10 layers of 200, each depending on 3 steps of
   the layer before, each sleeping 200 ms, with --parallelism 200. The
   critical path is 10 x 200 ms = 2 s; the figure is wall time / 2 s
   (target <= 1.03, issue 41's, with durable state: every transition is flushed), and
   the run's peak resident memory. The same shape at 20,000 steps (10
   layers of 2,000, --parallelism 2000) shows how time and memory grow
   (target <= 1.10, issue 41's; --steps picks the sizes).
2. plan: `flow plan` of 10,000 applied, unchanged steps (target < 1 s and
   < 200 MB resident), and of 100,000 (issue 41's target < 2 s; its memory
   printed; --plan-steps picks the sizes).
3. for_each: `flow plan` (offline, empty state) of one step with
   `for_each = "${range(10000)}"`, each instance's inputs computed with
   expressions (target < 1 s and < 200 MB resident).
4. modules: `flow validate` plus an offline `flow plan` of a workflow that
   calls one module 50 times, the module 40 steps in a chain reading its
   inputs (2,000 steps; target < 0.3 s for the two together).

Usage: bench/core.py [--flow PATH] [--runs N] [--only apply,plan,for_each,modules]
                     [--steps 2000,20000] [--plan-steps 10000,100000]
Builds the release binary first unless --flow is given. Prints the table of
what it judged and exits 1 when a figure misses its target (bench/judge.py).
"""

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from judge import Judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layered_workflow(layers, width, fan_in, delay_ms, seed=7):
    rng = random.Random(seed)
    out = ['[workflow]\nname = "bench-layers"\n']
    for layer in range(layers):
        for i in range(width):
            name = f"s{layer}_{i}"
            out.append(f'[steps.{name}]\nprovider = "null"\n')
            if layer > 0:
                deps = rng.sample(range(width), fan_in)
                refs = ", ".join(f'"s{layer - 1}_{d}"' for d in deps)
                out.append(f"depends_on = [{refs}]\n")
            out.append(f"[steps.{name}.inputs]\ndelay_ms = {delay_ms}\nindex = {i}\n")
            if layer > 0:
                out.append(f'from = "${{steps.s{layer - 1}_{deps[0]}.outputs.index}}"\n')
    return "".join(out)


def run(flow, args, cwd):
    """Run flow; return (wall seconds, max RSS in MB of this child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([flow] + args, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        sys.exit(f"flow {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    # ru_maxrss of children is the max over all children so far (KiB on Linux).
    return wall, max(after, before) / 1024.0, proc.stdout


def rss_of(flow, args, cwd):
    """Peak RSS of one run, measured in a fresh child so earlier runs don't mask it."""
    code = (
        "import resource,subprocess,sys,time;"
        "t=time.perf_counter();"
        "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
        "w=time.perf_counter()-t;"
        "print(p.returncode, w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code, flow] + args, cwd=cwd,
                         stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    rc, wall, kib = int(out[0]), float(out[1]), int(out[2])
    if rc != 0:
        sys.exit(f"flow {' '.join(args)} failed with {rc}")
    return wall, kib / 1024.0


def run_alone(flow, args, cwd):
    """Run flow; return (wall seconds, peak RSS in MB of this run alone, stdout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([flow] + args, cwd=cwd, stdout=out, stderr=err,
                                env={**os.environ, "NO_COLOR": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        sys.exit(f"flow {' '.join(args)} failed ({proc.returncode}):\n{stdout}\n{stderr}")
    # ru_maxrss is in KiB on Linux.
    return wall, usage.ru_maxrss / 1024.0, stdout


def bench_apply(flow, runs, judge, steps=2000):
    layers, fan_in, delay = 10, 3, 200
    width = steps // layers
    critical = layers * delay / 1000.0
    results = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="flow-bench-apply-")
        try:
            with open(os.path.join(d, "wf.toml"), "w") as f:
                f.write(layered_workflow(layers, width, fan_in, delay))
            wall, rss, out = run_alone(flow, ["apply", "wf.toml", "--auto-approve", "-q",
                                              "--parallelism", str(width)], d)
            if f"{layers * width} created" not in out:
                sys.exit(f"unexpected apply output:\n{out}")
            results.append((wall / critical, rss))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    results.sort()
    ratios = [r for r, _ in results]
    median = ratios[len(ratios) // 2]
    peak = max(m for _, m in results)
    over_ms = (median - 1) * critical * 1000
    print(f"apply {layers * width} null steps ({layers} layers x {width}, fan-in {fan_in},"
          f" {delay} ms each, --parallelism {width})")
    print(f"  critical path            {critical:.2f} s")
    print(f"  wall / critical path     median {median:.3f}  (runs: {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"  overhead                 {over_ms:.0f} ms, {over_ms * 1000 / (layers * width):.0f} us a step")
    print(f"  peak resident memory     {peak:.0f} MB ({peak * 1024 / (layers * width):.1f} KiB a step)")
    # Issue 41's targets: 2,000 steps at <= 1.03 (1.05 until then), 20,000 at <= 1.10.
    limit = 1.03 if steps <= 2000 else 1.10
    judge.at_most(f"apply {layers * width:,} null steps: wall / critical path", median, limit)
    judge.note(f"apply {layers * width:,} null steps: peak resident memory", f"{peak:.0f} MB")
    return median, peak


def bench_plan(flow, runs, judge, n=10_000):
    d = tempfile.mkdtemp(prefix="flow-bench-plan-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(layered_workflow(50, n // 50, 3, 0))
        t0 = time.perf_counter()
        run(flow, ["apply", "wf.toml", "--auto-approve", "-q", "--parallelism", "256"], d)
        setup = time.perf_counter() - t0
        results = [rss_of(flow, ["plan", "wf.toml", "--detailed-exitcode"], d) for _ in range(runs)]
        results.sort()
        wall, rss = results[len(results) // 2]
        peak = max(r for _, r in results)
        print(f"plan of {n:,} applied, unchanged steps (50 layers x {n // 50:,}, fan-in 3; apply took {setup:.1f} s)")
        print(f"  wall                     median {wall:.3f} s  (runs: {', '.join(f'{w:.3f}' for w, _ in results)})")
        print(f"  peak resident memory     {peak:.0f} MB")
        if n <= 10_000:
            judge.below(f"plan of {n:,} unchanged steps: wall", wall, 1, unit=" s")
            judge.below(f"plan of {n:,} unchanged steps: peak resident memory", peak, 200, "{:.0f}", " MB")
        else:
            # Issue 41's target; memory is printed (MB per 1,000 steps) to see it grow linearly.
            judge.below(f"plan of {n:,} unchanged steps: wall", wall, 2, unit=" s")
            judge.note(f"plan of {n:,} unchanged steps: peak resident memory",
                       f"{peak:.0f} MB ({peak * 1000 / n:.1f} MB per 1,000 steps)")
        return wall, peak
    finally:
        shutil.rmtree(d, ignore_errors=True)


FOR_EACH = """[workflow]
name = "bench-for-each"

[vars.count]
type = "integer"
default = 10000

[vars.sizes]
type = "list"
default = [2, 4, 8, 16]

[steps.nccl]
provider = "null"
for_each = "${range(vars.count)}"
[steps.nccl.inputs]
delay_ms = 0
index = "${each.value}"
nodes = "${element(vars.sizes, each.value)}"
label = '${format("nccl-%05d-%s", each.value, upper(each.key))}'

[steps.report]
provider = "null"
depends_on = ["nccl"]
[steps.report.inputs]
first = '${steps.nccl["0"].outputs.index}'
"""


def bench_for_each(flow, runs, judge):
    d = tempfile.mkdtemp(prefix="flow-bench-for-each-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(FOR_EACH)
        results = [rss_of(flow, ["plan", "wf.toml", "-q"], d) for _ in range(runs)]
        results.sort()
        wall, _ = results[len(results) // 2]
        peak = max(r for _, r in results)
        print("plan (offline, empty state) of a for_each over 10,000 keys (range(10000), 3 computed inputs each)")
        print(f"  wall                     median {wall:.3f} s  (runs: {', '.join(f'{w:.3f}' for w, _ in results)})")
        print(f"  peak resident memory     {peak:.0f} MB")
        judge.below("for_each over 10,000 keys: plan wall", wall, 1, unit=" s")
        judge.below("for_each over 10,000 keys: peak resident memory", peak, 200, "{:.0f}", " MB")
        return wall, peak
    finally:
        shutil.rmtree(d, ignore_errors=True)


def module_files(calls=50, steps=40):
    """The workflow (calls x one module) and the module's text."""
    module = ['[inputs.name]\n\n[inputs.index]\ntype = "integer"\n\n[inputs.upstream]\ndefault = ""\n']
    for i in range(steps):
        module.append(f'[steps.s{i}]\nprovider = "null"\n')
        if i:
            module.append(f'depends_on = ["s{i - 1}"]\n')
        module.append(f'[steps.s{i}.inputs]\ndelay_ms = 0\nlabel = "${{inputs.name}}-{i}"\n'
                      f'index = "${{inputs.index * 100 + {i}}}"\n')
    module.append(f'\n[outputs]\nlast = "${{steps.s{steps - 1}.outputs.index}}"\n')
    wf = ['[workflow]\nname = "bench-modules"\n']
    for c in range(calls):
        upstream = f'"${{modules.m{c - 1}.outputs.last}}"' if c % 5 else '""'
        wf.append(f'\n[modules.m{c}]\nsource = "modules/chain"\n'
                  f'inputs = {{ name = "m{c}", index = {c}, upstream = {upstream} }}\n')
    return "".join(wf), "".join(module)


def bench_modules(flow, runs, judge):
    d = tempfile.mkdtemp(prefix="flow-bench-modules-")
    try:
        wf, module = module_files()
        os.makedirs(os.path.join(d, "modules", "chain"))
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(wf)
        with open(os.path.join(d, "modules", "chain", "main.toml"), "w") as f:
            f.write(module)
        results = []
        for _ in range(runs):
            v_wall, v_rss = rss_of(flow, ["validate", "wf.toml"], d)
            p_wall, p_rss = rss_of(flow, ["plan", "wf.toml", "-q", "--refresh=false"], d)
            results.append((v_wall + p_wall, v_wall, p_wall, max(v_rss, p_rss)))
        results.sort()
        total, v_wall, p_wall, _ = results[len(results) // 2]
        peak = max(r[3] for r in results)
        print("validate + offline plan of 50 module calls x 40 steps (2,000 steps)")
        print(f"  wall                     median {total:.3f} s (validate {v_wall:.3f} s, plan {p_wall:.3f} s;"
              f" runs: {', '.join(f'{r[0]:.3f}' for r in results)})")
        print(f"  peak resident memory     {peak:.0f} MB")
        judge.below("50 module calls: validate + offline plan", total, 0.3, unit=" s")
        return total, peak
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="apply,plan,for_each,modules",
                    help="comma-separated cases to run (apply, plan, for_each, modules)")
    ap.add_argument("--steps", default="2000,20000",
                    help="comma-separated sizes of the apply case, in 10 layers each")
    ap.add_argument("--plan-steps", default="10000,100000",
                    help="comma-separated sizes of the plan case, in 50 layers each")
    args = ap.parse_args()
    cases = set(args.only.split(","))
    flow = os.path.abspath(args.flow) if args.flow else None
    if not flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(ROOT, "target", "release", "flow")
    print(f"machine: {os.cpu_count()} cores; flow: {flow}\n")
    sizes = [int(n) for n in args.steps.split(",")]
    applies = [("apply", lambda f, r, j, n=n: bench_apply(f, r, j, n)) for n in sizes]
    plans = [("plan", lambda f, r, j, n=n: bench_plan(f, r, j, n))
             for n in (int(n) for n in args.plan_steps.split(","))]
    benches = applies + plans + [("for_each", bench_for_each), ("modules", bench_modules)]
    judge = Judge("core")
    for i, (name, bench) in enumerate(b for b in benches if b[0] in cases):
        if i:
            print()
        bench(flow, args.runs, judge)
    judge.finish()


if __name__ == "__main__":
    main()
