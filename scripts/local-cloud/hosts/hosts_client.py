"""A client of the host manager (manager.py beside this file): one request,
one answer, over the Unix socket that FLOW_LOCAL_HOSTS names."""

import json
import os
import socket


class HostError(Exception):
    """The manager refused a request, or could not be reached."""


def socket_path():
    """The manager's socket (FLOW_LOCAL_HOSTS), or None when hosts are off."""
    return os.environ.get("FLOW_LOCAL_HOSTS") or None


def call(request, path=None, timeout=120.0):
    """Sends REQUEST (a dict with "op") and returns the answer's dict.
    Raises HostError with the manager's error when it is not ok."""
    path = path or socket_path()
    if not path:
        raise HostError("FLOW_LOCAL_HOSTS is not set: run under scripts/local-hosts")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(json.dumps(request).encode() + b"\n")
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError as e:
        raise HostError("the host manager at %s: %s" % (path, e))
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        raise HostError("the host manager at %s answered no JSON" % path)
    if not answer.get("ok"):
        raise HostError(answer.get("error") or "the host manager refused %r" % request.get("op"))
    return answer
