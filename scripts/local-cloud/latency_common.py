"""What the latency model's layers share: reading a request's body."""

import json
import urllib.parse


def form(body):
    """A Query API body (`Action=...&Name=...`) as a dict of first values."""
    return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}


def as_json(body):
    """A JSON body as a dict; an empty or broken one as {}."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def stack_name(name):
    """A stack's name from its name or id
    (arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/UUID)."""
    if name and name.startswith("arn:") and "/" in name:
        return name.split("/")[1]
    return name
