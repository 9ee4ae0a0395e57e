"""EKS clusters whose API server is real, for the local cloud.

moto 5.2.5 describes every EKS cluster with a made-up endpoint
(`https://RANDOM.RANDOM.REGION.eks.amazonaws.com/`, which nothing answers)
and 1,400 random characters as its certificate authority, so a client that
reaches a cluster as on AWS (DescribeCluster's `endpoint` and
`certificateAuthority.data`, as `aws eks update-kubeconfig` writes them into
a kubeconfig) has nowhere to go. The tests start a real kube-apiserver; this
lets them tell the local cloud that it is the API server of the cluster
named NAME:

    POST /moto-api/flow-eks/endpoint
    {"name": NAME, "endpoint": "https://127.0.0.1:PORT",
     "certificateAuthority": BASE64_OF_THE_CA_PEM}

From then on DescribeCluster, CreateCluster and DeleteCluster describe every
cluster of that name (in any account and region, made before or after the
call) with that endpoint and CA, in the fields AWS's EKS API reference
gives them (Cluster: `endpoint`, "the endpoint for your Kubernetes API
server"; `certificateAuthority.data`, "the Base64-encoded certificate data
required to communicate with your cluster",
https://docs.aws.amazon.com/eks/latest/APIReference/API_Cluster.html). A
name never registered keeps moto's endpoint. The answer is 200 `{}`; a body
without the three strings, or an endpoint that is not https, is 400.
"""

import json
import threading

from moto.eks.models import Cluster

PATH = "/moto-api/flow-eks/endpoint"

# cluster name -> (endpoint, base64 CA)
_REGISTERED = {}
_LOCK = threading.Lock()


def _registered(cluster):
    with _LOCK:
        return _REGISTERED.get(getattr(cluster, "name", None))


def _endpoint_get(self):
    found = _registered(self)
    return found[0] if found else self._moto_endpoint


def _endpoint_set(self, value):
    self._moto_endpoint = value


def _ca_get(self):
    found = _registered(self)
    return {"data": found[1]} if found else self._moto_certificate_authority


def _ca_set(self, value):
    self._moto_certificate_authority = value


def _register(body):
    try:
        doc = json.loads(body or b"{}")
        name, endpoint, ca = (
            doc["name"],
            doc["endpoint"],
            doc["certificateAuthority"],
        )
    except (ValueError, KeyError, TypeError) as e:
        return 400, {"message": "expected name, endpoint, certificateAuthority: %s" % e}
    if not all(isinstance(v, str) and v for v in (name, endpoint, ca)):
        return 400, {"message": "name, endpoint and certificateAuthority are strings"}
    if not endpoint.startswith("https://"):
        return 400, {"message": "an EKS endpoint is https: %s" % endpoint}
    with _LOCK:
        _REGISTERED[name] = (endpoint, ca)
    return 200, {}


def install():
    """Describes registered clusters with their real API server, and serves
    the call that registers one."""
    Cluster.endpoint = property(_endpoint_get, _endpoint_set)
    Cluster.certificate_authority = property(_ca_get, _ca_set)

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    dispatch = DomainDispatcherApplication.__call__

    def call(self, environ, start_response):
        if environ.get("PATH_INFO") != PATH:
            return dispatch(self, environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST":
            status, doc = 405, {"message": "POST only"}
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            status, doc = _register(environ["wsgi.input"].read(length))
        text = json.dumps(doc).encode()
        reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed"}[status]
        start_response(
            "%d %s" % (status, reason),
            [("Content-Type", "application/json"), ("Content-Length", str(len(text)))],
        )
        return [text]

    DomainDispatcherApplication.__call__ = call
