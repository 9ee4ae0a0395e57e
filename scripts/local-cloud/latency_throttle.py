"""The latency model's API throttling: a token bucket per call kind, as AWS's.

AWS limits API calls per account and Region with token buckets: each call
takes a token from its API's bucket, which holds at most `burst` tokens and
refills at `rate` tokens a second; a call that finds the bucket empty is
refused with the service's throttling error (the EC2 API throttling page
describes exactly this; other services publish a rate, or nothing).

The buckets come from the `[throttle]` table of the latency model's table
(bench/latency.toml), keyed "service:Operation" (or "service:*" for every
operation of a service without its own row), each `{ rate = R, burst = B }`.
For S3 the operation is the request's class, "GET" (GET and HEAD) or "PUT"
(PUT, POST, DELETE), and the bucket is kept per S3 bucket: S3's published
rates are per prefix, and a bucket is the coarsest prefix. The service is
the one the request is signed for (its Authorization header's credential
scope), as AWS routes it.

Throttling is on only when the table has `[throttle]` AND the server's
environment says FLOW_LATENCY_THROTTLE=1: every other test and bench sees
the model as before. FLOW_LATENCY_SCALE does not touch the rates: a rate
limit is calls per second of wall time, and flow's calls take wall time
whatever the scale of the operations they wait on.

A refused call gets its protocol's own error, as AWS sends it:
- Query protocol (CloudFormation and the like): 400, <Code>Throttling</Code>,
  "Rate exceeded";
- EC2: 503, <Code>RequestLimitExceeded</Code>;
- JSON protocols (Secrets Manager, FSx, ...): 400, "ThrottlingException";
- REST-JSON (EKS, Batch): 429, "ThrottlingException";
- S3: 503, <Code>SlowDown</Code>.
The refusals are counted per operation, served in the model's report under
"throttled".

POST /moto-api/flow-latency/throttle with the body `on` or `off` switches
the throttle at run time (it starts on): a test or bench makes its objects
unthrottled, then times the refresh under the limits. The buckets start
full when switched on.
"""

import os
import re
import threading
import time
import uuid

from latency_deletes import Answer

SWITCH_PATH = "/moto-api/flow-latency/throttle"
_SCOPE = re.compile(r"Credential=[^/,]+/[^/,]+/[^/,]+/([^/,]+)/")


def from_table(table):
    """A Throttle for the table's `[throttle]` rows, or None when the table
    has none or the environment does not ask for it."""
    rows = table.get("throttle")
    if not rows or os.environ.get("FLOW_LATENCY_THROTTLE") != "1":
        return None
    return Throttle(rows)


class Bucket:
    """One token bucket: `burst` tokens at most, `rate` more a second."""

    def __init__(self, rate, burst, now):
        self.rate = float(rate)
        self.burst = float(burst)
        self.tokens = self.burst
        self.at = now

    def take(self, now):
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def service_of(environ):
    """The service a request is signed for, or "" when unsigned."""
    found = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return found.group(1) if found else ""


class Throttle:
    """The buckets, made on first use, and the refusals by operation."""

    def __init__(self, rows):
        self.rows = {key: (float(row["rate"]), float(row.get("burst", row["rate"]))) for key, row in rows.items()}
        self.lock = threading.Lock()
        self.buckets = {}
        self.refused = {}
        self.on = True

    def switch(self, environ, start_response):
        """Answers the switch request: `on` or `off` in the body."""
        length = int(environ.get("CONTENT_LENGTH") or 0)
        word = environ["wsgi.input"].read(length).decode().strip() if length else ""
        if word not in ("on", "off"):
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"say on or off"]
        with self.lock:
            self.on = word == "on"
            self.buckets.clear()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(word)))])
        return [word.encode()]

    def limit(self, service, operation):
        """The (rate, burst) for a call kind, or None when it is not limited."""
        return self.rows.get(f"{service}:{operation}") or self.rows.get(f"{service}:*")

    def check(self, environ, req, op):
        """None when the call may go on; else the throttling answer to send."""
        if not self.on:
            return None
        service = service_of(environ)
        if service == "s3":
            operation = "GET" if req.method in ("GET", "HEAD") else "PUT"
            # Path-style requests (the tests' loopback endpoint): the bucket
            # is the first segment of the path.
            partition = req.path.strip("/").split("/", 1)[0]
        else:
            operation, partition = op, ""
        limit = self.limit(service, operation)
        if limit is None:
            return None
        now = time.monotonic()
        with self.lock:
            key = (service, operation, partition)
            bucket = self.buckets.get(key)
            if bucket is None:
                bucket = self.buckets[key] = Bucket(limit[0], limit[1], now)
            if bucket.take(now):
                return None
            self.refused[op] = self.refused.get(op, 0) + 1
        return refusal(service, req)

    def report(self):
        """The refusals so far, by operation."""
        with self.lock:
            return dict(self.refused)


def refusal(service, req):
    """The throttling error AWS sends for this request's protocol."""
    request_id = str(uuid.uuid4())
    if service == "s3":
        body = b"" if req.method == "HEAD" else (
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
            "<Message>Please reduce your request rate.</Message>"
            f"<RequestId>{request_id}</RequestId></Error>").encode()
        return Answer(body, "application/xml", "503 Slow Down", [("x-amz-request-id", request_id)])
    if req.target:
        body = b'{"__type":"ThrottlingException","message":"Rate exceeded"}'
        return Answer(body, "application/x-amz-json-1.1", "400 Bad Request",
                      [("x-amzn-RequestId", request_id)])
    if service == "ec2":
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>"
                "<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
                f"</Error></Errors><RequestID>{request_id}</RequestID></Response>").encode()
        return Answer(body, "text/xml;charset=UTF-8", "503 Service Unavailable")
    if req.form_encoded:
        body = ("<ErrorResponse xmlns=\"http://cloudformation.amazonaws.com/doc/2010-05-15/\">"
                "<Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>"
                f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>").encode()
        return Answer(body, "text/xml", "400 Bad Request", [("x-amzn-RequestId", request_id)])
    body = b'{"message":"Rate exceeded"}'
    return Answer(body, "application/json", "429 Too Many Requests",
                  [("x-amzn-ErrorType", "ThrottlingException"), ("x-amzn-RequestId", request_id)])
