"""The test cloud's latency model: operations that take time, as AWS's do.

moto finishes every create at once: a stack is CREATE_COMPLETE, a cluster
ACTIVE, a file system AVAILABLE in the answer to the call that made it. With
FLOW_LATENCY_MODEL naming a table (bench/latency.toml), this WSGI layer in
front of moto's server keeps each such resource in progress for the table's
duration divided by its `scale` (FLOW_LATENCY_SCALE overrides it), counted
from when its create call arrived: its status calls answer CREATING or
CREATE_IN_PROGRESS until then, whatever moto says. It also counts every call
by operation and, for each held resource, the status calls that looked at it
and when the first one saw it ready, served as JSON at
GET /moto-api/flow-latency/report (the bench's and the tests' figures).
A request with the header `X-Flow-Model: off` passes through untouched and
uncounted: a test's look at what moto itself holds, beside the model's view.

Modelled: CloudFormation CreateStack (a stack lasts as long as its slowest
resource type in the table), EKS CreateCluster and CreateNodegroup, FSx
CreateFileSystem, Batch CreateComputeEnvironment, and Batch SubmitJob (a job
is RUNNING for the table's `batch.job` length: DescribeJobs answers RUNNING
until then, whatever moto says; Batch API reference, JobDetail.status).
Deletes of stacks, EKS clusters and node groups and FSx file systems take
the table's `[deletes]` lengths: see latency_deletes.py. With
FLOW_LATENCY_THROTTLE=1, the table's `[throttle]` rates limit each API as
AWS's token buckets do: see latency_throttle.py. With FLOW_LATENCY_S3=1,
every S3 call takes the table's `[s3]` first-byte latency and transfer
time: see latency_s3.py.
"""

import io
import json
import os
import re
import threading
import time
import tomllib

from latency_common import as_json as _json, form as _form, stack_name as _stack_name
import latency_s3
import latency_throttle
from latency_deletes import Answer, Deletes
from warm_up import WarmUp

REPORT_PATH = "/moto-api/flow-latency/report"


class Held:
    """One resource held in progress."""

    def __init__(self, kind, name, seconds, arrived):
        self.kind = kind
        self.name = name
        # The clock starts when the create call arrived, not when moto
        # answered it: moto does a stack's or a cluster's emulation inside
        # the call (100 - 200 ms, 6 - 12 s at x60), where AWS does that work
        # inside the operation's length.
        self.created = arrived
        self.ready = self.created + seconds
        self.looks = 0
        self.first_seen_ready = None

    def in_progress(self, now):
        return now < self.ready

    def looked(self, now):
        self.looks += 1
        if now >= self.ready and self.first_seen_ready is None:
            self.first_seen_ready = now

    def as_json(self):
        return {
            "kind": self.kind,
            "name": self.name,
            "created": self.created,
            "ready": self.ready,
            "seconds": self.ready - self.created,
            "looks": self.looks,
            "first_seen_ready": self.first_seen_ready,
        }


class Model:
    """The table, the held resources and the call counts."""

    def __init__(self, table, scale):
        self.table = table
        self.scale = scale
        self.lock = threading.Lock()
        self.held = {}
        self.calls = {}
        # Every call's operation, start and end (time.time()), for finding
        # where a run's time went between the held operations.
        self.timeline = []
        # Per-API token buckets (latency_throttle.py), None unless asked for.
        self.throttle = latency_throttle.from_table(table)
        # S3's first-byte latency and throughput (latency_s3.py), None
        # unless asked for; the bytes each S3 operation sent, always.
        self.s3 = latency_s3.from_table(table)
        self.bytes_in = {}

    def seconds(self, section, key):
        real = self.table.get(section, {}).get(key)
        return None if real is None else float(real) / self.scale

    def stack_seconds(self, template):
        types = set(re.findall(r"AWS::[A-Za-z0-9]+::[A-Za-z0-9]+", template or ""))
        section = self.table.get("cloudformation", {})
        real = max(
            [float(section[t]) for t in types if t in section],
            default=float(section.get("default", 60)),
        )
        return real / self.scale

    def hold(self, kind, name, seconds, arrived):
        with self.lock:
            # A create answered twice (a retried call moto accepted again)
            # keeps the first clock: the far side started once. One that
            # has ended is a new operation on the same name (made again).
            old = self.held.get((kind, name))
            if old is None or not old.in_progress(arrived):
                self.held[(kind, name)] = Held(kind, name, seconds, arrived)

    def look(self, kind, name):
        """Whether `name` is still in progress; counts the look."""
        now = time.time()
        with self.lock:
            held = self.held.get((kind, name))
            if held is None:
                return False
            held.looked(now)
            return held.in_progress(now)

    def count(self, op):
        with self.lock:
            self.calls[op] = self.calls.get(op, 0) + 1

    def sent(self, op, size):
        if size:
            with self.lock:
                self.bytes_in[op] = self.bytes_in.get(op, 0) + size

    def answered(self, op, started):
        with self.lock:
            self.timeline.append((op, started, time.time()))

    def report(self):
        with self.lock:
            return {
                "scale": self.scale,
                "calls": dict(self.calls),
                "throttled": self.throttle.report() if self.throttle else {},
                "bytes_in": dict(self.bytes_in),
                "held": [h.as_json() for h in self.held.values()],
                "timeline": [{"op": op, "start": a, "end": b} for op, a, b in self.timeline],
            }


class Request:
    """What the model needs of one request."""

    def __init__(self, environ):
        self.arrived = time.time()
        self.method = environ.get("REQUEST_METHOD", "GET")
        self.path = environ.get("PATH_INFO", "")
        self.target = environ.get("HTTP_X_AMZ_TARGET", "")
        content_type = environ.get("CONTENT_TYPE", "")
        self.form_encoded = content_type.startswith("application/x-www-form-urlencoded")
        self.body = b""
        length = environ.get("CONTENT_LENGTH")
        # Only the small bodies of API calls are read here; S3 uploads (and
        # chunked bodies) pass through untouched.
        if length and (self.target or self.form_encoded or self.path.startswith(("/clusters", "/v1/"))):
            self.body = environ["wsgi.input"].read(int(length))
            environ["wsgi.input"] = io.BytesIO(self.body)
        self.form = _form(self.body) if self.form_encoded else {}

    def operation(self):
        """The operation, named as tests/support/fault_proxy.rs names it."""
        if self.target:
            return self.target.rsplit(".", 1)[-1]
        if "Action" in self.form:
            return self.form["Action"]
        if self.path.startswith("/v1/"):
            return "batch:" + self.path[len("/v1/"):]
        if self.path.startswith("/clusters"):
            return f"eks:{self.method} {self.path}"
        return f"s3:{self.method} {self.path}"


def _rewrite_json(out, change):
    try:
        doc = json.loads(out)
    except ValueError:
        return out
    return json.dumps(doc).encode() if change(doc) else out


class Layer:
    """The WSGI layer: counts, holds, rewrites."""

    def __init__(self, app, model, warm_up=None):
        self.app = app
        self.model = model
        self.warm_up = warm_up
        self.deletes = Deletes(model, app)

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == REPORT_PATH:
            body = json.dumps(self.model.report()).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if environ.get("PATH_INFO") == latency_throttle.SWITCH_PATH and self.model.throttle:
            return self.model.throttle.switch(environ, start_response)
        if environ.get("HTTP_X_FLOW_MODEL") == "off":
            return self.app(environ, start_response)
        if self.warm_up is not None:
            if self.warm_up.is_warm_up(environ):
                return self.app(environ, start_response)
            self.warm_up.wait(environ)
        req = Request(environ)
        started = req.arrived
        op = req.operation()
        self.model.count(op)
        early = self.model.throttle and self.model.throttle.check(environ, req, op)
        early = early or self.deletes.before(req, op, environ)
        if isinstance(early, Answer):
            start_response(early.status, [("Content-Type", early.content_type),
                                          ("Content-Length", str(len(early.body))), *early.headers])
            self.model.answered(op, started)
            return [early.body]
        after = early or self.after(req, op)
        is_s3 = latency_throttle.service_of(environ) == "s3"
        s3 = self.model.s3 if is_s3 else None
        if is_s3:
            self.model.sent(op, latency_s3.sent_bytes(environ))
        if after is None and s3 is None:
            try:
                return self.app(environ, start_response)
            finally:
                self.model.answered(op, started)
        captured = {}
        chunks = []

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return chunks.append

        result = self.app(environ, capture)
        try:
            chunks.extend(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        out = b"".join(chunks)
        status = captured["status"]
        if status.startswith("2") and after is not None:
            out = after(out)
        if s3 is not None:
            s3.hold(req.arrived, latency_s3.sent_bytes(environ), len(out))
        headers = captured["headers"]
        if req.method != "HEAD":  # a HEAD's Content-Length is the object's
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(out))))
        start_response(status, headers)
        self.model.answered(op, started)
        return [out]

    def after(self, req, op):
        """What to do with a successful answer to `op`, or None to pass it through."""
        m = self.model
        if op == "CreateStack":
            name = req.form.get("StackName")
            seconds = m.stack_seconds(req.form.get("TemplateBody"))
            return lambda out: (m.hold("cloudformation", name, seconds, req.arrived), out)[1]
        if op == "DescribeStacks" and req.form.get("StackName"):
            name = _stack_name(req.form["StackName"])

            def describe_stack(out):
                if m.look("cloudformation", name):
                    out = out.replace(b"<StackStatus>CREATE_COMPLETE</StackStatus>",
                                      b"<StackStatus>CREATE_IN_PROGRESS</StackStatus>")
                return out

            return describe_stack
        if op == "CreateFileSystem":
            seconds = m.seconds("operations", "fsx.lustre")

            def created_fs(out):
                fs_id = _json(out).get("FileSystem", {}).get("FileSystemId")
                if fs_id and seconds is not None:
                    m.hold("fsx.lustre", fs_id, seconds, req.arrived)
                return out

            return created_fs
        if op == "DescribeFileSystems":
            # moto gives no Lifecycle (cloud_pcluster_fsx.py adds AVAILABLE): absent reads as AVAILABLE.
            def describe_fs(out):
                out = self.deletes.after_describe_file_systems(out)

                def change(doc):
                    changed = False
                    for fs in doc.get("FileSystems", []):
                        if m.look("fsx.lustre", fs.get("FileSystemId")) and fs.get("Lifecycle", "AVAILABLE") == "AVAILABLE":
                            fs["Lifecycle"] = "CREATING"
                            changed = True
                    return changed

                return _rewrite_json(out, change)

            return describe_fs
        parts = req.path.strip("/").split("/")
        if req.method == "POST" and parts == ["clusters"]:
            return self._hold_named(req, "eks.cluster", _json(req.body).get("name"))
        if req.method == "POST" and len(parts) == 3 and parts[0] == "clusters" and parts[2] == "node-groups":
            name = _json(req.body).get("nodegroupName")
            return self._hold_named(req, "eks.nodegroup", f"{parts[1]}/{name}")
        if req.method == "GET" and len(parts) == 2 and parts[0] == "clusters":
            return self._describe_named("eks.cluster", parts[1], "cluster", "ACTIVE")
        if req.method == "GET" and len(parts) == 4 and parts[0] == "clusters" and parts[2] == "node-groups":
            return self._describe_named("eks.nodegroup", f"{parts[1]}/{parts[3]}", "nodegroup", "ACTIVE")
        if op == "batch:submitjob":
            seconds = m.seconds("operations", "batch.job")

            def submitted(out):
                job_id = _json(out).get("jobId")
                if job_id and seconds is not None:
                    m.hold("batch.job", job_id, seconds, req.arrived)
                return out

            return submitted
        if op == "batch:describejobs":
            def describe_jobs(out):
                def change(doc):
                    changed = False
                    for job in doc.get("jobs", []):
                        if m.look("batch.job", job.get("jobId")) and job.get("status") in ("SUCCEEDED", "FAILED"):
                            job["status"] = "RUNNING"
                            for key in ("stoppedAt", "statusReason"):
                                job.pop(key, None)
                            (job.get("container") or {}).pop("exitCode", None)
                            changed = True
                    return changed

                return _rewrite_json(out, change)

            return describe_jobs
        if op == "batch:createcomputeenvironment":
            return self._hold_named(req, "batch.compute_environment", _json(req.body).get("computeEnvironmentName"))
        if op == "batch:describecomputeenvironments":
            def describe_ce(out):
                def change(doc):
                    changed = False
                    for ce in doc.get("computeEnvironments", []):
                        if m.look("batch.compute_environment", ce.get("computeEnvironmentName")) and ce.get("status") == "VALID":
                            ce["status"] = "CREATING"
                            changed = True
                    return changed

                return _rewrite_json(out, change)

            return describe_ce
        return None

    def _hold_named(self, req, kind, name):
        seconds = self.model.seconds("operations", kind)
        if not name or seconds is None:
            return None
        return lambda out: (self.model.hold(kind, name, seconds, req.arrived), out)[1]

    def _describe_named(self, kind, name, field, done):
        def describe(out):
            if not self.model.look(kind, name):
                return out

            def change(doc):
                obj = doc.get(field) or {}
                if obj.get("status") == done:
                    obj["status"] = "CREATING"
                    return True
                return False

            return _rewrite_json(out, change)

        return describe


def install():
    """Wraps moto's server application when FLOW_LATENCY_MODEL names a table."""
    path = os.environ.get("FLOW_LATENCY_MODEL")
    if not path:
        return
    with open(path, "rb") as f:
        table = tomllib.load(f)
    scale = float(os.environ.get("FLOW_LATENCY_SCALE") or table.get("scale", 60))
    model = Model(table, scale)
    warm = WarmUp()
    warm.start()

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    dispatch = DomainDispatcherApplication.__call__

    def call(self, environ, start_response):
        layer = getattr(self, "_flow_latency", None)
        if layer is None:
            layer = self._flow_latency = Layer(lambda e, s: dispatch(self, e, s), model, warm)
        return layer(environ, start_response)

    DomainDispatcherApplication.__call__ = call
    print(f"latency model: {path}, durations divided by {scale:g}", flush=True)
