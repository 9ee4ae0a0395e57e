"""The moto server of bench/peer-terraform.py: moto's own server with a
WSGI layer that counts every request by operation, one fresh server per
tool and workload, on a free loopback port."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")

# moto's own server with a WSGI layer that counts each request by operation
# (named as latency_model.py and tests/support/fault_proxy.rs name them) and
# answers /peer-bench/calls and /peer-bench/objects itself, uncounted.
SERVER = r'''
import io, json, sys, threading, urllib.parse
from collections import Counter
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
import moto.server

ACCOUNT = "123456789012"
lock = threading.Lock()
calls = Counter()
dispatch = DomainDispatcherApplication.__call__


def operation(environ):
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return target.rsplit(".", 1)[-1]
    method = environ.get("REQUEST_METHOD", "GET")
    path = environ.get("PATH_INFO", "")
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        n = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(n) if n else b""
        environ["wsgi.input"] = io.BytesIO(body)
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        if "Action" in form:
            return form["Action"][0]
    if "Action" in query:
        return query["Action"][0]
    if "x-id" in query:
        return "s3:" + query["x-id"][0]
    parts = [p for p in path.split("/") if p]
    what = "service" if not parts else "bucket" if len(parts) == 1 else "object"
    sub = ",".join(sorted(k for k, v in query.items() if v == [""]))
    return f"s3:{method} {what}" + (f"?{sub}" if sub else "")


def objects():
    from moto.s3.models import s3_backends
    from moto.secretsmanager.models import secretsmanager_backends
    from moto.cloudformation.models import cloudformation_backends
    out = {"buckets": [], "secrets": [], "stacks": []}
    if ACCOUNT in s3_backends:
        for partition in s3_backends[ACCOUNT].values():
            out["buckets"] += list(partition.buckets)
    if ACCOUNT in secretsmanager_backends:
        backend = secretsmanager_backends[ACCOUNT]["us-east-1"]
        out["secrets"] = [s.name for s in backend.secrets.values()
                          if not getattr(s, "deleted_date", None)]
    if ACCOUNT in cloudformation_backends:
        backend = cloudformation_backends[ACCOUNT]["us-east-1"]
        out["stacks"] = [s.name for s in backend.stacks.values()
                         if s.status != "DELETE_COMPLETE"]
    return out


def call(self, environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path.startswith("/peer-bench/"):
        with lock:
            doc = dict(calls) if path.endswith("/calls") else objects()
        body = json.dumps(doc).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    if not path.startswith("/moto-api") and environ.get("HTTP_X_PEER_BENCH") != "warm-up":
        op = operation(environ)
        with lock:
            calls[op] += 1
    return dispatch(self, environ, start_response)


DomainDispatcherApplication.__call__ = call
moto.server.main(sys.argv[1:])
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Moto:
    """One fresh moto server with the counting layer, on a free loopback port."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="moto-peer-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([VENV_PY, "-c", SERVER, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=self.log)
        for _ in range(600):
            try:
                self.get("/moto-api/data.json")
                self.warm_up()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        sys.exit(f"moto did not start; see {self.log.name}")

    def warm_up(self):
        """One uncounted call to each service: moto loads a service (and its
        CloudFormation every model it can parse) on first use, which would
        otherwise be charged to the first command of whichever tool."""
        for service, method, headers, body in [
            ("s3", "GET", {}, None),
            ("secretsmanager", "POST", {"X-Amz-Target": "secretsmanager.ListSecrets",
                                        "Content-Type": "application/x-amz-json-1.1"}, b"{}"),
            ("cloudformation", "POST", {"Content-Type": "application/x-www-form-urlencoded"},
             b"Action=DescribeStacks&Version=2010-05-15"),
            ("sts", "POST", {"Content-Type": "application/x-www-form-urlencoded"},
             b"Action=GetCallerIdentity&Version=2011-06-15"),
        ]:
            auth = (f"AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, "
                    "SignedHeaders=host, Signature=0")
            req = urllib.request.Request(self.endpoint + "/", data=body, method=method,
                                         headers={"Authorization": auth, "X-Peer-Bench": "warm-up", **headers})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()

    def get(self, path):
        with urllib.request.urlopen(self.endpoint + path, timeout=120) as r:
            return r.read()

    def calls(self):
        return json.loads(self.get("/peer-bench/calls"))

    def objects(self):
        return json.loads(self.get("/peer-bench/objects"))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)

    def env(self, work):
        none = os.path.join(work, "no-such-aws-file")
        return {
            **os.environ,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": none,
            "AWS_SHARED_CREDENTIALS_FILE": none,
            "AWS_PROFILE": "",
            "NO_COLOR": "1",
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
        }
