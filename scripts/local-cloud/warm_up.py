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

import sys
import threading
import time
import urllib.request

HEADER = "X-Flow-Warm-Up"
ENVIRON_KEY = "HTTP_X_FLOW_WARM_UP"
REGION = "us-east-1"

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


def _port(argv):
    for flag in ("-p", "--port"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return int(argv[argv.index(flag) + 1])
    return 5000


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
        urllib.request.urlopen(req, timeout=30).read()
    except Exception:  # an error answer warms the service as well
        pass


class WarmUp:
    """The warm-up of one server: started once, waited for by every call."""

    def __init__(self):
        self.done = threading.Event()

    def start(self, argv=None):
        base = f"http://127.0.0.1:{_port(argv or sys.argv)}"
        threading.Thread(target=self._run, args=(base,), daemon=True).start()

    def _run(self, base):
        try:
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    urllib.request.urlopen(
                        urllib.request.Request(base + "/moto-api/data.json", headers={HEADER: "1"}), timeout=1
                    ).read()
                    break
                except Exception:
                    time.sleep(0.05)
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
