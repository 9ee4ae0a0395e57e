"""Warms moto's services before the latency model measures a call.

moto builds each service's backend on the first call to it: the first
DescribeInstanceTypes takes about 300 ms (it loads EC2's catalogue of
instance types), the first EKS call about 200 ms, the first CloudFormation
call 40 - 230 ms; later calls take 2 - 10 ms. AWS has no such first call.
Under the latency model (lengths / 60) such a first call would weigh as
2 - 18 s of a run, so with the model on, the server makes one cheap read
of each service flow uses before it answers anything else: the calls that
arrive meanwhile wait for it. The reads carry `X-Flow-Warm-Up` and are
neither counted nor timed.
"""

import os
import sys
import threading
import time
import urllib.request

HEADER = "X-Flow-Warm-Up"
ENVIRON_KEY = "HTTP_X_FLOW_WARM_UP"
REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

# (service as signed, method, path, extra headers, body): one cheap read each.
_QUERY = "application/x-www-form-urlencoded"
_JSON = "application/x-amz-json-1.1"
CALLS = [
    ("ec2", "POST", "/", {"Content-Type": _QUERY},
     "Action=DescribeInstanceTypes&Version=2016-11-15&InstanceType.1=p5.48xlarge"),
    ("ec2", "POST", "/", {"Content-Type": _QUERY}, "Action=DescribeSubnets&Version=2016-11-15"),
    ("cloudformation", "POST", "/", {"Content-Type": _QUERY}, "Action=DescribeStacks&Version=2010-05-15"),
    ("eks", "GET", "/clusters", {}, ""),
    ("fsx", "POST", "/", {"Content-Type": _JSON, "X-Amz-Target": "AWSSimbaAPIService_v20180301.DescribeFileSystems"}, "{}"),
    ("batch", "POST", "/v1/describejobqueues", {"Content-Type": "application/json"}, "{}"),
    ("iam", "POST", "/", {"Content-Type": _QUERY}, "Action=ListRoles&Version=2010-05-08"),
    ("sts", "POST", "/", {"Content-Type": _QUERY}, "Action=GetCallerIdentity&Version=2011-06-15"),
    ("ecr", "POST", "/", {"Content-Type": _JSON, "X-Amz-Target": "AmazonEC2ContainerRegistry_V20150921.DescribeRepositories"}, "{}"),
    ("secretsmanager", "POST", "/", {"Content-Type": _JSON, "X-Amz-Target": "secretsmanager.ListSecrets"}, "{}"),
    ("s3", "GET", "/", {}, ""),
]


def _option(argv, short, long):
    """The value of `-x V`, `-xV`, `--long V` or `--long=V` in argv, or None."""
    for i, arg in enumerate(argv):
        if arg in (short, long) and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(long + "="):
            return arg[len(long) + 1:]
        if arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
            return arg[len(short):]
    return None


def _base(argv):
    """Where the server listens, as moto_server's arguments say (MOTO_PORT,
    which moto's main sets from them, first)."""
    port = os.environ.get("MOTO_PORT") or _option(argv, "-p", "--port") or "5000"
    host = _option(argv, "-H", "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    scheme = "https" if "-s" in argv or "--ssl" in argv else "http"
    return f"{scheme}://{host}:{port}"


def _call(base, service, method, path, headers, body):
    scope = f"testing/20260101/{REGION}/{service}/aws4_request"
    req = urllib.request.Request(
        base + path,
        data=body.encode() if body else None,
        method=method,
        headers={
            **headers,
            HEADER: "1",
            "Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0",
        },
    )
    try:
        urllib.request.urlopen(req, timeout=5).read()
    except Exception:  # an error answer warms the service as well
        pass


class WarmUp:
    """The warm-up of one server: started once, waited for by every call."""

    def __init__(self):
        self.done = threading.Event()

    def start(self, argv=None):
        threading.Thread(target=self._run, args=(argv or sys.argv,), daemon=True).start()

    def _run(self, argv):
        try:
            # The server answers within a second or two of its start; if it
            # does not within 20 s, nothing is warmed and nothing waits more.
            deadline = time.time() + 20
            while time.time() < deadline:
                base = _base(argv)
                try:
                    urllib.request.urlopen(
                        urllib.request.Request(base + "/moto-api/data.json", headers={HEADER: "1"}), timeout=1
                    ).read()
                    break
                except Exception:
                    time.sleep(0.05)
            else:
                return
            for call in CALLS:
                _call(base, *call)
        finally:
            self.done.set()

    def wait(self, environ):
        """Holds a call other than the warm-up's own until the services are warm."""
        if environ.get(ENVIRON_KEY) is None:
            self.done.wait(60)

    @staticmethod
    def is_warm_up(environ):
        return environ.get(ENVIRON_KEY) is not None
