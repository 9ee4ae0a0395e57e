#!/usr/bin/env python3
"""Run history benchmark for flow; prints its figures.

`flow runs` over 10,000 recorded runs (a third of them NCCL-shaped: five
values, a 32-size bandwidth table, two gate verdicts; about 4 KB each),
seeded into a local state by state/examples/seed_runs.rs:
  1. `flow runs wf.toml` (the table of every run);
  2. `flow runs wf.toml nccl --json` (one step's runs, every field).
Target: each under 200 ms (median).
3. `flow report` of a state with 100 such runs: under 1 s, the page under 2 MB.

Usage: bench/runs.py [--flow PATH] [--runs N] [--count N]
Builds the release binaries first unless --flow is given. Prints the table of
what it judged and exits 1 when a figure misses its target (bench/judge.py).
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

from judge import Judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(flow, args, cwd):
    t0 = time.perf_counter()
    out = subprocess.run([flow] + args, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - t0, len(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flow")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--count", type=int, default=10_000)
    a = ap.parse_args()
    if not a.flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "flow-state", "--example", "seed_runs"],
        cwd=ROOT,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    flow = os.path.abspath(a.flow) if a.flow else os.path.join(target, "release", "flow")
    seed = os.path.join(target, "release", "examples", "seed_runs")
    d = tempfile.mkdtemp(prefix="flow-bench-runs-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write('[workflow]\nname = "bench-runs"\n\n[steps.nccl]\nprovider = "null"\n')
        t0 = time.perf_counter()
        # The state of wf.toml: .flow/wf (one folder per workflow file).
        subprocess.run([seed, os.path.join(d, ".flow", "wf"), str(a.count)], check=True)
        setup = time.perf_counter() - t0
        db = sum(
            os.path.getsize(os.path.join(p, f))
            for p, _, fs in os.walk(os.path.join(d, ".flow"))
            for f in fs
        )
        print(f"run history of {a.count} runs (seeded in {setup:.1f} s; state on disk {db / 1e6:.1f} MB)")
        judge = Judge("runs")
        for label, args in [
            ("flow runs (all, table)", ["runs", "wf.toml"]),
            ("flow runs nccl --json", ["runs", "wf.toml", "nccl", "--json"]),
        ]:
            results = sorted(timed(flow, args, d) for _ in range(a.runs))
            wall, size = results[len(results) // 2]
            print(
                f"  {label:<26} median {wall * 1000:.0f} ms, {size / 1e6:.1f} MB printed "
                f"(runs: {', '.join(f'{w * 1000:.0f}' for w, _ in results)} ms)"
            )
            judge.below(f"{label} of {a.count:,} runs", wall * 1000, 200, "{:.0f}", " ms")
        bench_report(flow, seed, a.runs, judge)
        judge.finish()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_report(flow, seed, runs, judge, count=100):
    """`flow report` of a state with `count` runs: < 1 s and < 2 MB."""
    d = tempfile.mkdtemp(prefix="flow-bench-report-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write('[workflow]\nname = "bench-report"\n\n[steps.nccl]\nprovider = "null"\n')
        subprocess.run([seed, os.path.join(d, ".flow", "wf"), str(count)], check=True)
        results = sorted(timed(flow, ["report", "wf.toml", "-o", "report.html"], d) for _ in range(runs))
        wall = results[len(results) // 2][0]
        size = os.path.getsize(os.path.join(d, "report.html"))
        print(f"report of {count} runs")
        print(f"  flow report                median {wall * 1000:.0f} ms, page {size / 1024:.0f} KB "
              f"(runs: {', '.join(f'{w * 1000:.0f}' for w, _ in results)} ms)")
        judge.below(f"flow report of {count} runs", wall, 1, unit=" s")
        judge.below(f"flow report of {count} runs: page size", size / 1e6, 2 * 1024 * 1024 / 1e6, "{:.2f}", " MB")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
