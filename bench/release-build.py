#!/usr/bin/env python3
"""A clean release build of `flow`: how long it takes, where the time goes, how big it is.

Builds `cargo build --release -p flow --timings` into a fresh target folder
(nothing reused from target/, so the figure is that of a fresh clone with
the crates already downloaded), then prints the wall time, the binary's
size, and the slowest units from cargo's timings report, with the AWS SDK
crates and the workspace's own crates summed apart. Judged (issue 41): wall
time <= 15 min on this machine, and a binary smaller than the one built
with every crate at opt-level 3 (82,566,672 bytes, measured 2026-11-27 on
this machine, `target/release/flow` at 23a74bb).

Usage: bench/release-build.py [--target-dir DIR] [--keep] [--binary-out FILE]
  --target-dir  where to build (default: a new folder under target/); it
                must not exist yet, so the build is clean
  --keep        leave the folder (default: removed, unless --binary-out)
  --binary-out  write the built binary's path into FILE (bench/all hands
                it to the other benches); implies --keep
  --flow        accepted and ignored (bench/all passes it to every bench)
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judge import Judge  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_SECONDS = 15 * 60
BEFORE_BYTES = 82_566_672
WORKSPACE = {"flow", "flow-providers", "flow-state"}


def units(timings_html):
    """The units cargo's timings report lists: (name, target, seconds), slowest first."""
    with open(timings_html) as f:
        text = f.read()
    found = re.search(r"const UNIT_DATA = (\[.*?\]);\s*$", text, re.S | re.M)
    if not found:
        return []
    data = json.loads(found.group(1))
    rows = [(u["name"], u.get("target", "").strip() or "lib", float(u["duration"])) for u in data]
    return sorted(rows, key=lambda r: -r[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target-dir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--binary-out")
    ap.add_argument("--flow", help=argparse.SUPPRESS)
    a = ap.parse_args()
    target = os.path.abspath(a.target_dir or os.path.join(ROOT, "target", f"bench-release-build-{os.getpid()}"))
    if os.path.exists(target):
        sys.exit(f"release-build: {target} exists; the build must start clean (remove it or name another)")
    env = {**os.environ, "CARGO_TARGET_DIR": target}
    print(f"release-build: cargo build --release -p flow --timings into {target} ({os.cpu_count()} cores)",
          flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow", "--timings"], cwd=ROOT,
                        env=env).returncode
    wall = time.perf_counter() - t0
    judge = Judge("release-build")
    if rc != 0:
        judge.check("cargo build --release", f"exit {rc} after {wall:.0f} s", "exit 0", False)
        judge.finish()
    binary = os.path.join(target, "release", "flow")
    size = os.path.getsize(binary)
    reports = sorted(f for f in os.listdir(os.path.join(target, "cargo-timings"))
                     if f.startswith("cargo-timing-") and f.endswith(".html"))
    rows = units(os.path.join(target, "cargo-timings", reports[-1])) if reports else []
    print(f"\nwall {wall / 60:.1f} min ({wall:.0f} s), binary {size:,} bytes")
    if rows:
        total = sum(r[2] for r in rows)
        sdk = sum(r[2] for r in rows if r[0].startswith("aws-sdk-"))
        own = sum(r[2] for r in rows if r[0] in WORKSPACE)
        print(f"unit time (summed over both cores' work): {total:.0f} s; aws-sdk-* {sdk:.0f} s "
              f"({sdk / total:.0%}); flow's own crates {own:.0f} s ({own / total:.0%})")
        print("slowest units:")
        for name, target_kind, took in rows[:15]:
            print(f"  {took:7.1f} s  {name} ({target_kind})")
        judge.note("unit seconds, aws-sdk-* / all", f"{sdk:.0f} / {total:.0f}")
        judge.note("unit seconds, flow's own crates", f"{own:.0f}")
        judge.note("slowest unit", f"{rows[0][0]} {rows[0][2]:.0f} s")
    else:
        print("cargo's timings report had no unit table this script can read", file=sys.stderr)
        judge.check("timings report read", "no", "yes", False)
    judge.at_most("clean release build, minutes", wall / 60, TARGET_SECONDS / 60, fmt="{:.1f}", unit=" min")
    judge.below("binary size, MB", size / 1e6, BEFORE_BYTES / 1e6, fmt="{:.1f}", unit=" MB")
    if a.binary_out:
        with open(a.binary_out, "w") as out:
            out.write(binary)
    elif not a.keep:
        shutil.rmtree(target, ignore_errors=True)
    judge.finish()


if __name__ == "__main__":
    main()
