#!/usr/bin/env python3
"""The apply benchmark with the state in S3, under S3's latency; prints its figures.

The workflow of bench/core.py (`null` steps in 10 layers, fan-in 3, 200 ms
each, --parallelism = a layer's width; critical path 2 s) at 2,000 and
20,000 steps (--steps), applied on the same machine:

1. with the local state (sled in .flow/), as in bench/core.py;
2. with `[workflow.state] backend = "s3"` against a moto server started
   here on loopback, the bucket versioned, behind the local cloud's latency
   model with S3's latency on (FLOW_LATENCY_S3=1: every S3 call takes
   bench/latency.toml's [s3] first-byte latency plus its bodies at its
   per-connection throughput; scripts/local-cloud/latency_s3.py).

It prints wall / critical path for both (target for S3: <= 1.25, issue 41
part 3) and what the state's writes sent, counted by the model's server
(bytes and PutObject calls by object: the snapshot KEY, the deltas
KEY.log/, the lock), per apply and per step transition (a step makes two:
its intent, then its result). "Whole document per write" is what the
design before the log sent for the same batches: the state document as it
stood after each batch, every batch (computed from the deltas of the run,
read back from moto past the model).

Usage: bench/s3-state.py [--flow PATH] [--runs N] [--steps 2000,20000]
Builds the release binary first unless --flow is given. Needs moto in
.venv (any test run or `scripts/local-aws true` installs it). Prints the
table of what it judged and exits 1 when a figure misses its target
(bench/judge.py).
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core import layered_workflow, run  # noqa: E402
from judge import Judge  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS, FAN_IN, DELAY_MS = 10, 3, 200
BUCKET = "bench-flow-state"
TABLE = os.path.join(ROOT, "bench", "latency.toml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(endpoint, method, path, body=b"", model=True):
    """One S3 call; `model=False` passes the latency model untouched."""
    # moto tells the service by the credential scope of the signature.
    auth = ("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=0")
    headers = {"Authorization": auth, "Content-Type": "application/xml"}
    if not model:
        headers["X-Flow-Model"] = "off"
    req = urllib.request.Request(endpoint + path, data=body or None, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.read().decode()


class Moto:
    """A moto server on a free loopback port with S3's latency, stopped on exit."""

    def __init__(self):
        python = os.path.join(ROOT, ".venv", "bin", "python")
        if not os.path.exists(python):
            sys.exit("moto is not installed in .venv: run `scripts/local-aws true` once")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="moto-bench-", suffix=".log", delete=False)
        env = {**os.environ, "FLOW_LATENCY_MODEL": TABLE, "FLOW_LATENCY_S3": "1"}
        server = os.path.join(ROOT, "scripts", "local-cloud", "moto_server.py")
        self.proc = subprocess.Popen([python, server, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=self.log, env=env)
        for _ in range(600):
            try:
                http(self.endpoint, "GET", "/moto-api/data.json", model=False)
                return
            except OSError:
                time.sleep(0.1)
        sys.exit(f"moto did not start; see {self.log.name}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        os.unlink(self.log.name)

    def env(self):
        none = os.path.join(tempfile.gettempdir(), "no-such-aws-file")
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": none,
            "AWS_SHARED_CREDENTIALS_FILE": none,
        }

    def versioned_bucket(self, name):
        http(self.endpoint, "PUT", f"/{name}", model=False)
        http(self.endpoint, "PUT", f"/{name}?versioning",
             b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
             b"<Status>Enabled</Status></VersioningConfiguration>", model=False)

    def report(self):
        return json.loads(http(self.endpoint, "GET", "/moto-api/flow-latency/report", model=False))

    def keys(self, bucket, prefix):
        """Every key under `prefix`, in order, past the model."""
        keys, token = [], ""
        while True:
            page = http(self.endpoint, "GET", f"/{bucket}?list-type=2&prefix={prefix}{token}", model=False)
            keys += re.findall(r"<Key>(.*?)</Key>", page)
            if "<IsTruncated>true</IsTruncated>" not in page:
                return keys
            nxt = re.search(r"<NextContinuationToken>(.*?)</NextContinuationToken>", page).group(1)
            token = "&continuation-token=" + urllib.parse.quote(nxt)

    def version_bodies(self, bucket, key):
        """The bodies of every version of `key`, oldest first, past the model."""
        ids, marker = [], ""
        while True:
            page = http(self.endpoint, "GET", f"/{bucket}?versions&prefix={key}{marker}", model=False)
            for v in re.findall(r"<Version>.*?</Version>", page, re.S):
                if f"<Key>{key}</Key>" in v:
                    ids.append(re.search(r"<VersionId>(.*?)</VersionId>", v).group(1))
            if "<IsTruncated>true</IsTruncated>" not in page:
                break
            km = re.search(r"<NextKeyMarker>(.*?)</NextKeyMarker>", page).group(1)
            vm = re.search(r"<NextVersionIdMarker>(.*?)</NextVersionIdMarker>", page).group(1)
            marker = f"&key-marker={km}&version-id-marker={vm}"
        return [http(self.endpoint, "GET", f"/{bucket}/{key}?versionId={i}", model=False) for i in reversed(ids)]


def whole_document_bytes(moto, key):
    """What writing the whole document after every batch would have sent for
    this run's batches: the first snapshot, then after each delta the
    document as it stood (its records, in the snapshot's encoding)."""
    first = json.loads(moto.version_bodies(BUCKET, key)[0])
    records = {s["name"]: len(json.dumps(s, separators=(",", ":"))) for s in first["steps"]}
    header = len(json.dumps({k: v for k, v in first.items() if k != "steps"}, separators=(",", ":"))) + 10
    total, batches = header + sum(records.values()) + len(records), 1
    for delta_key in moto.keys(BUCKET, key + ".log/"):
        delta = json.loads(http(moto.endpoint, "GET", f"/{BUCKET}/{delta_key}", model=False))
        for change in delta["changes"]:
            if change["record"] is None:
                records.pop(change["name"], None)
            else:
                records[change["name"]] = len(json.dumps(change["record"], separators=(",", ":")))
        total += header + sum(records.values()) + len(records)
        batches += 1
    return total, batches


def apply_once(flow, text, steps, env=None):
    d = tempfile.mkdtemp(prefix="flow-bench-s3-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(text)
        old = dict(os.environ)
        os.environ.update(env or {})
        try:
            wall, _, out = run(flow, ["apply", "wf.toml", "--auto-approve", "-q",
                                      "--parallelism", str(steps // LAYERS)], d)
        finally:
            os.environ.clear()
            os.environ.update(old)
        if f"{steps} created" not in out:
            sys.exit(f"unexpected apply output:\n{out}")
        return wall
    finally:
        shutil.rmtree(d, ignore_errors=True)


def state_table(key):
    return (f'\n[workflow.state]\nbackend = "s3"\nbucket = "{BUCKET}"\n'
            f'key = "{key}"\nregion = "us-east-1"\n')


def median(xs):
    return sorted(xs)[len(xs) // 2]


def sent(report, key):
    """Bytes and PutObject calls the run sent, by object: snapshot, deltas, lock."""
    out = {"snapshot": [0, 0], "deltas": [0, 0], "lock": [0, 0]}
    for op, calls in report["calls"].items():
        if not op.startswith(f"s3:PUT /{BUCKET}/{key}"):
            continue
        rest = op[len(f"s3:PUT /{BUCKET}/{key}"):].split("?")[0]
        kind = {"": "snapshot", ".lock": "lock"}.get(rest, "deltas" if rest.startswith(".log/") else None)
        if kind:
            out[kind][0] += report["bytes_in"].get(op, 0)
            out[kind][1] += calls
    return out


def mb(n):
    return f"{n / 1e6:.2f} MB"


def bench(flow, steps, runs, moto, judge):
    width = steps // LAYERS
    critical = LAYERS * DELAY_MS / 1000.0
    base = layered_workflow(LAYERS, width, FAN_IN, DELAY_MS)
    # The state table belongs to [workflow], which the generated text opens first.
    head, rest = base.split("\n", 2)[0:2], base.split("\n", 2)[2]
    local = [apply_once(flow, base, steps) / critical for _ in range(runs)]
    remote, writes = [], []
    for i in range(runs):
        key = f"bench/{steps}-run-{i}.json"
        text = "\n".join(head) + "\n" + state_table(key) + rest
        remote.append(apply_once(flow, text, steps, moto.env()) / critical)
        writes.append((sent(moto.report(), key), whole_document_bytes(moto, key)))
    transitions = 2 * steps
    w, (whole, batches) = writes[len(writes) // 2]
    state_bytes = w["snapshot"][0] + w["deltas"][0]
    print(f"apply {steps} null steps ({LAYERS} layers x {width}, fan-in {FAN_IN}, {DELAY_MS} ms each, "
          f"--parallelism {width}); critical path {critical:.2f} s")
    print(f"  local state   wall / critical path  median {median(local):.3f}  "
          f"(runs: {', '.join(f'{r:.3f}' for r in local)})")
    print(f"  S3 state      wall / critical path  median {median(remote):.3f}  "
          f"(runs: {', '.join(f'{r:.3f}' for r in remote)})")
    print(f"  S3 / local    {median(remote) / median(local):.3f}")
    print(f"  state writes (run {len(writes) // 2 + 1}): {batches} batches; "
          f"deltas {w['deltas'][1]} PUTs {mb(w['deltas'][0])}, snapshot {w['snapshot'][1]} PUTs "
          f"{mb(w['snapshot'][0])}, lock {w['lock'][1]} PUTs")
    print(f"  bytes written to the state per apply      {mb(state_bytes)}  "
          f"(whole document per write: {mb(whole)}, x{whole / max(state_bytes, 1):.1f})")
    print(f"  bytes written per step transition         {state_bytes / transitions:,.0f} B  "
          f"(whole document per write: {whole / transitions:,.0f} B)")
    judge.at_most(f"{steps:,} steps, S3 state under S3's latency: wall / critical path", median(remote), 1.25)
    judge.note(f"{steps:,} steps, local state: wall / critical path", f"{median(local):.3f}")
    judge.note(f"{steps:,} steps, S3 state: bytes written per apply",
               f"{mb(state_bytes)} (whole document per write: {mb(whole)})")
    judge.note(f"{steps:,} steps, S3 state: bytes written per transition",
               f"{state_bytes / transitions:,.0f} B (whole document per write: {whole / transitions:,.0f} B)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", default="2000,20000", help="comma-separated sizes")
    args = ap.parse_args()
    flow = os.path.abspath(args.flow) if args.flow else None
    if not flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(ROOT, "target", "release", "flow")
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; flow: {flow}")
    with open(TABLE, "rb") as f:
        s3 = tomllib.load(f)["s3"]
    print(f"S3 model: first byte {s3['first_byte']} s, {s3['throughput'] / 1e6:.0f} MB/s a connection "
          f"(bench/latency.toml [s3])\n")
    judge = Judge("s3-state")
    moto = Moto()
    try:
        moto.versioned_bucket(BUCKET)
        for steps in [int(n) for n in args.steps.split(",")]:
            bench(flow, steps, args.runs, moto, judge)
            print()
    finally:
        moto.stop()
    judge.finish()


if __name__ == "__main__":
    main()
