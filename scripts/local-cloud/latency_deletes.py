"""The latency model's deletes: a delete takes time, as AWS's do.

moto removes a resource inside the call that deletes it. AWS answers the
call and keeps the resource, in a deleting state, until the delete is done:
a stack is DELETE_IN_PROGRESS until DELETE_COMPLETE (CloudFormation
DeleteStack API reference: "Deleted stacks do not show up in the
DescribeStacks operation if the deletion has been completed successfully"),
an EKS cluster or managed node group is DELETING (EKS API reference,
DeleteCluster, DeleteNodegroup: the answer carries status DELETING), an FSx
file system's Lifecycle is DELETING (FSx API reference, DeleteFileSystem).

This module plays that: before a delete reaches moto it looks the resource
up through moto (the describe flow itself would send) and keeps that answer;
the delete then goes to moto as sent, its answer and errors unchanged. For
the table's `[deletes]` length of the kind (divided by its scale) the
resource's describe calls are answered from the kept answer, its status
changed to the deleting one; afterwards moto answers, and the resource is
gone. The model counts these looks as it counts a create's. A create of a
name whose delete is still held is refused as AWS refuses it
(CloudFormation CreateStack API reference: AlreadyExistsException; EKS
CreateCluster and CreateNodegroup: ResourceInUseException).
"""

import io
import json
import re
import time

from latency_common import stack_name, as_json

# The status a deleting resource shows, by kind.
DELETING = {
    "cloudformation.stack": "DELETE_IN_PROGRESS",
    "eks.cluster": "DELETING",
    "eks.nodegroup": "DELETING",
    "fsx.lustre": "DELETING",
}


def inner_call(app, environ, method, path, body, target=None):
    """Calls moto with a request made from `environ` (its headers and
    credentials): (status line, body bytes)."""
    env = dict(environ)
    env["REQUEST_METHOD"] = method
    env["PATH_INFO"] = path
    env["QUERY_STRING"] = ""
    env["wsgi.input"] = io.BytesIO(body)
    env["CONTENT_LENGTH"] = str(len(body))
    if target is not None:
        env["HTTP_X_AMZ_TARGET"] = target
    captured = {}

    def start(status, headers, exc_info=None):
        captured["status"] = status
        return lambda _: None

    result = app(env, start)
    try:
        out = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return captured.get("status", "500"), out


class Answer:
    """An answer given without asking moto."""

    def __init__(self, body, content_type, status="200 OK", headers=()):
        self.body = body
        self.content_type = content_type
        self.status = status
        self.headers = list(headers)


class Deletes:
    """Deletes held in progress: the kept answers and the model's clocks."""

    def __init__(self, model, app):
        self.model = model
        self.app = app
        self.kept = {}

    def seconds(self, kind):
        return self.model.seconds("deletes", kind)

    def before(self, req, op, environ):
        """For a delete: keeps the resource's description and returns what
        to do once moto answered. For a describe of a deleting resource: an
        [`Answer`]. Otherwise None."""
        parts = req.path.strip("/").split("/")
        refused = self._create_while_deleting(req, op, parts)
        if refused is not None:
            return refused
        if op == "DeleteStack" and self.seconds("cloudformation.stack") is not None:
            name = stack_name(req.form.get("StackName"))
            body = f"Action=DescribeStacks&Version=2010-05-15&StackName={name}".encode()
            status, out = inner_call(self.app, environ, "POST", "/", body)
            if status.startswith("2") and b"<StackStatus>" in out:
                deleting = re.sub(rb"<StackStatus>[A-Z_]+</StackStatus>",
                                  b"<StackStatus>DELETE_IN_PROGRESS</StackStatus>", out)
                return self._hold("cloudformation.stack", name, req, Answer(deleting, "text/xml"))
            return None
        if op == "DescribeStacks" and req.form.get("StackName"):
            return self._kept("cloudformation.stack", stack_name(req.form["StackName"]))
        if req.method == "DELETE" and len(parts) == 2 and parts[0] == "clusters":
            return self._hold_json(req, environ, "eks.cluster", parts[1], "cluster")
        if req.method == "DELETE" and len(parts) == 4 and parts[0] == "clusters" and parts[2] == "node-groups":
            return self._hold_json(req, environ, "eks.nodegroup", f"{parts[1]}/{parts[3]}", "nodegroup")
        if req.method == "GET" and len(parts) == 2 and parts[0] == "clusters":
            return self._kept("eks.cluster", parts[1])
        if req.method == "GET" and len(parts) == 4 and parts[0] == "clusters" and parts[2] == "node-groups":
            return self._kept("eks.nodegroup", f"{parts[1]}/{parts[3]}")
        if op == "DeleteFileSystem" and self.seconds("fsx.lustre") is not None:
            fs_id = as_json(req.body).get("FileSystemId")
            body = json.dumps({"FileSystemIds": [fs_id]}).encode()
            target = req.target.rsplit(".", 1)[0] + ".DescribeFileSystems"
            status, out = inner_call(self.app, environ, "POST", req.path or "/", body, target)
            found = as_json(out).get("FileSystems") or []
            if status.startswith("2") and found:
                fs = dict(found[0], Lifecycle="DELETING")
                return self._hold("fsx.lustre", fs_id, req, fs)
            return None
        if op == "DescribeFileSystems":
            ids = as_json(req.body).get("FileSystemIds") or []
            deleting = [self._deleting("fsx.lustre", i) for i in ids]
            if ids and all(deleting):
                return Answer(json.dumps({"FileSystems": deleting}).encode(), "application/x-amz-json-1.1")
        return None

    def _create_while_deleting(self, req, op, parts):
        """A create of a name whose delete is still in progress, refused as
        AWS refuses it (CloudFormation CreateStack: AlreadyExistsException;
        EKS CreateCluster, CreateNodegroup: ResourceInUseException, HTTP
        409): moto, which deleted it at once, would make it again."""
        if op == "CreateStack":
            name = req.form.get("StackName")
            if self._still_deleting("cloudformation.stack", name):
                body = ('<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/">'
                        "<Error><Type>Sender</Type><Code>AlreadyExistsException</Code>"
                        f"<Message>Stack [{name}] already exists</Message></Error>"
                        "<RequestId>flow-latency-model</RequestId></ErrorResponse>")
                return Answer(body.encode(), "text/xml", "400 Bad Request")
            return None
        kind, name = None, None
        if req.method == "POST" and parts == ["clusters"]:
            kind, name = "eks.cluster", as_json(req.body).get("name")
        elif req.method == "POST" and len(parts) == 3 and parts[0] == "clusters" and parts[2] == "node-groups":
            kind, name = "eks.nodegroup", f"{parts[1]}/{as_json(req.body).get('nodegroupName')}"
        if kind and self._still_deleting(kind, name):
            body = json.dumps({"__type": "ResourceInUseException",
                               "message": f"{name} is being deleted"}).encode()
            return Answer(body, "application/json", "409 Conflict",
                          [("x-amzn-ErrorType", "ResourceInUseException")])
        return None

    def _still_deleting(self, kind, name):
        """Whether `name`'s delete is held now (not counted as a look)."""
        with self.model.lock:
            held = self.model.held.get((f"{kind} delete", name))
        return held is not None and held.in_progress(time.time())

    def after_describe_file_systems(self, out):
        """A listing of every file system shows the deleting ones too."""
        doc = as_json(out)
        if "FileSystems" not in doc:
            return out
        have = {fs.get("FileSystemId") for fs in doc["FileSystems"]}
        extra = [fs for (kind, name), fs in list(self.kept.items())
                 if kind == "fsx.lustre" and name not in have and self._deleting(kind, name)]
        if not extra:
            return out
        doc["FileSystems"].extend(extra)
        return json.dumps(doc).encode()

    def _hold_json(self, req, environ, kind, name, field):
        if self.seconds(kind) is None:
            return None
        status, out = inner_call(self.app, environ, "GET", req.path, b"")
        doc = as_json(out)
        if not status.startswith("2") or field not in doc:
            return None
        doc[field]["status"] = DELETING[kind]
        return self._hold(kind, name, req, Answer(json.dumps(doc).encode(), "application/json"))

    def _hold(self, kind, name, req, kept):
        seconds = self.seconds(kind)

        def held(out):
            self.kept[(kind, name)] = kept
            self.model.hold(f"{kind} delete", name, seconds, req.arrived)
            return out

        return held

    def _deleting(self, kind, name):
        """The kept description of `name` while its delete is in progress
        (counting the look), else None."""
        kept = self.kept.get((kind, name))
        if kept is None or not self.model.look(f"{kind} delete", name):
            return None
        return kept

    def _kept(self, kind, name):
        kept = self._deleting(kind, name)
        return kept if isinstance(kept, Answer) else None
