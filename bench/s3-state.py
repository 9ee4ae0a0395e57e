#!/usr/bin/env python3
"""The apply benchmark with the state in S3; prints its figures.

The workflow of bench/core.py (2,000 `null` steps in 10 layers of 200, fan-in
3, 200 ms each, --parallelism 200; critical path 2 s) applied twice on the
same machine:

1. with the local state (sled in .flow/), as in bench/core.py;
2. with `[workflow.state] backend = "s3"` against a moto server started
   here on loopback, the bucket versioned.

It prints wall / critical path for both (targets: local <= 1.05 as the
issue sets it, S3 <= 1.25) and the PutObject calls per step transition
(a step makes two transitions: its intent, then its result). PutObject
calls are counted by the server, not by flow: every successful write of
the state object is one version of it in the versioned bucket.

Usage: bench/s3-state.py [--flow PATH] [--runs N]
Builds the release binary first unless --flow is given. Needs moto in
.venv (any test run or `scripts/local-aws true` installs it). Prints the
table of what it judged and exits 1 when a figure misses its target
(bench/judge.py).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core import layered_workflow, run  # noqa: E402
from judge import Judge  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS, WIDTH, FAN_IN, DELAY_MS = 10, 200, 3, 200
BUCKET = "bench-flow-state"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(endpoint, method, path, body=b""):
    # moto tells the service by the credential scope of the signature.
    auth = ("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=0")
    req = urllib.request.Request(endpoint + path, data=body or None, method=method,
                                 headers={"Authorization": auth, "Content-Type": "application/xml"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


class Moto:
    """A moto server on a free loopback port, stopped on exit."""

    def __init__(self):
        server = os.path.join(ROOT, ".venv", "bin", "moto_server")
        if not os.path.exists(server):
            sys.exit("moto is not installed in .venv: run `scripts/local-aws true` once")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="moto-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=self.log)
        for _ in range(600):
            try:
                http(self.endpoint, "GET", "/moto-api/data.json")
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
        http(self.endpoint, "PUT", f"/{name}")
        http(self.endpoint, "PUT", f"/{name}?versioning",
             b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
             b"<Status>Enabled</Status></VersioningConfiguration>")

    def versions(self, bucket, key):
        """Successful PutObject calls on `key` (its versions, all pages), and
        the size in bytes of the newest."""
        count, size, marker = 0, 0, ""
        while True:
            page = http(self.endpoint, "GET", f"/{bucket}?versions&prefix={key}{marker}")
            for v in re.findall(r"<Version>.*?</Version>", page, re.S):
                if f"<Key>{key}</Key>" in v:
                    count += 1
                    if "<IsLatest>true</IsLatest>" in v:
                        size = int(re.search(r"<Size>(\d+)</Size>", v).group(1))
            if "<IsTruncated>true</IsTruncated>" not in page:
                return count, size
            key_marker = re.search(r"<NextKeyMarker>(.*?)</NextKeyMarker>", page).group(1)
            version_marker = re.search(r"<NextVersionIdMarker>(.*?)</NextVersionIdMarker>", page).group(1)
            marker = f"&key-marker={key_marker}&version-id-marker={version_marker}"


def apply_once(flow, text, env=None):
    d = tempfile.mkdtemp(prefix="flow-bench-s3-")
    try:
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(text)
        old = dict(os.environ)
        os.environ.update(env or {})
        try:
            wall, _, out = run(flow, ["apply", "wf.toml", "--auto-approve", "-q",
                                      "--parallelism", str(WIDTH)], d)
        finally:
            os.environ.clear()
            os.environ.update(old)
        if "2000 created" not in out:
            sys.exit(f"unexpected apply output:\n{out}")
        return wall
    finally:
        shutil.rmtree(d, ignore_errors=True)


def state_table(key):
    return (f'\n[workflow.state]\nbackend = "s3"\nbucket = "{BUCKET}"\n'
            f'key = "{key}"\nregion = "us-east-1"\n')


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    flow = os.path.abspath(args.flow) if args.flow else None
    if not flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(ROOT, "target", "release", "flow")
    print(f"machine: {os.cpu_count()} cores; flow: {flow}\n")
    critical = LAYERS * DELAY_MS / 1000.0
    base = layered_workflow(LAYERS, WIDTH, FAN_IN, DELAY_MS)
    # The state table belongs to [workflow], which the generated text opens first.
    head, rest = base.split("\n", 2)[0:2], base.split("\n", 2)[2]

    local = [apply_once(flow, base) / critical for _ in range(args.runs)]

    moto = Moto()
    try:
        moto.versioned_bucket(BUCKET)
        remote, puts, size = [], [], 0
        for i in range(args.runs):
            key = f"bench/run-{i}.json"
            text = "\n".join(head) + "\n" + state_table(key) + rest
            remote.append(apply_once(flow, text, moto.env()) / critical)
            count, size = moto.versions(BUCKET, key)
            puts.append(count)
    finally:
        moto.stop()

    transitions = 2 * LAYERS * WIDTH
    print(f"apply {LAYERS * WIDTH} null steps ({LAYERS} layers x {WIDTH}, fan-in {FAN_IN}, "
          f"{DELAY_MS} ms each, --parallelism {WIDTH}); critical path {critical:.2f} s")
    print(f"  local state   wall / critical path  median {median(local):.3f}  "
          f"(runs: {', '.join(f'{r:.3f}' for r in local)})")
    print(f"  S3 state      wall / critical path  median {median(remote):.3f}  "
          f"(runs: {', '.join(f'{r:.3f}' for r in remote)})")
    print(f"  S3 / local    {median(remote) / median(local):.3f}")
    print(f"  PutObject calls on the state object  median {median(puts)} for {transitions} "
          f"step transitions = {median(puts) / transitions:.4f} per transition "
          f"(runs: {', '.join(map(str, puts))}); the object ends at {size / 1e6:.2f} MB")
    judge = Judge("s3-state")
    judge.at_most("local state: wall / critical path", median(local), 1.05)
    judge.at_most("S3 state: wall / critical path", median(remote), 1.25)
    judge.note("S3 / local", f"{median(remote) / median(local):.3f}")
    judge.note("state object at the end", f"{size / 1e6:.2f} MB")
    judge.finish()


if __name__ == "__main__":
    main()
