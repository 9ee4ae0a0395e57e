"""Bucket policies whose `aws:SecureTransport` condition is evaluated, for
the local cloud.

ParallelCluster puts a policy on its bucket (`parallelcluster-…-v1-do-not-delete`)
that denies every request not made over TLS:

    {"Effect": "Deny", "Principal": "*", "Action": "s3:*", ...,
     "Condition": {"Bool": {"aws:SecureTransport": "false"}}}

AWS evaluates the condition per request: `aws:SecureTransport` is "true"
when the request was sent over TLS, "false" otherwise
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html#condition-keys-securetransport;
the Bool operator,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html#Conditions_Boolean;
S3's own example of this policy,
https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html).
A statement whose condition does not hold does not apply.

moto 5.2.5 checks a bucket's policy on object requests but drops the
condition: a Deny statement applies to every request, so with
ParallelCluster's policy in place every later object request is refused,
over TLS too. Here, on the object requests moto checks a bucket policy
for, a statement with `Bool`/`BoolIfExists` on `aws:SecureTransport`
applies only when the request's transport matches (https: "true", http:
"false", from the request the server received); statements without that
condition are left to moto as they are. A local cloud served over plain
HTTP therefore sees ParallelCluster's own policy deny its requests, as AWS
would; served over HTTPS (cloud_https.py, the clients given its CA), they
pass.

A statement applies only to the principals it names ("AWS JSON policy
elements: Principal",
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_principal.html#principal-services:
a service principal is the service itself acting, e.g. CloudWatch Logs
exporting into the bucket). moto applies every statement to every caller:
ParallelCluster's `DenyPutObjectOnReservedPath` (Deny s3:PutObject on
`parallelcluster/*` for the principal `logs.REGION.amazonaws.com`) then
refuses pcluster's own upload of `parallelcluster/.bootstrapped`. Here a
statement whose Principal names only services is left out: requests to the
local cloud come from the account's users and roles, never from a service.
"""

import json
import threading

from moto.s3 import models, responses

_request = threading.local()


def _secure_transport():
    """"true" or "false": how the request being answered came in."""
    return "true" if getattr(_request, "scheme", "http") == "https" else "false"


def _holds(values, actual):
    values = values if isinstance(values, list) else [values]
    return any(str(v).lower() == actual for v in values)


def applies(statement, secure):
    """Whether `statement`'s aws:SecureTransport condition holds for a
    request whose transport is `secure` ("true"/"false"); a statement
    without that condition applies as far as this check goes."""
    for operator in ("Bool", "BoolIfExists"):
        keys = (statement.get("Condition") or {}).get(operator) or {}
        for key, values in keys.items():
            if key.lower() == "aws:securetransport" and not _holds(values, secure):
                return False
    return True


def service_only(statement):
    """Whether STATEMENT's Principal names AWS services and nothing else."""
    principal = statement.get("Principal")
    return isinstance(principal, dict) and set(principal) == {"Service"}


def _without_transport(statement):
    """The statement with its aws:SecureTransport conditions (evaluated
    already) taken out, the rest left to moto."""
    condition = {}
    for operator, keys in (statement.get("Condition") or {}).items():
        if operator in ("Bool", "BoolIfExists"):
            keys = {k: v for k, v in keys.items() if k.lower() != "aws:securetransport"}
        if keys:
            condition[operator] = keys
    out = {k: v for k, v in statement.items() if k != "Condition"}
    if condition:
        out["Condition"] = condition
    return out


def install():
    original_permission = models.FakeBucket.get_permission
    original_key_response = responses.S3Response._key_response

    def get_permission(self, action, resource):
        from moto.iam.access_control import IAMPolicy, PermissionResult

        if self.policy is None:
            return PermissionResult.NEUTRAL
        policy = json.loads(self.policy.decode())
        statements = policy.get("Statement", [])
        statements = statements if isinstance(statements, list) else [statements]
        secure = _secure_transport()
        kept = [
            _without_transport(s)
            for s in statements
            if applies(s, secure) and not service_only(s)
        ]
        if not kept:
            return PermissionResult.NEUTRAL
        return IAMPolicy(json.dumps(dict(policy, Statement=kept))).is_action_permitted(
            action, resource
        )

    def _key_response(self, request, full_url):
        _request.scheme = getattr(request, "scheme", None) or full_url.split(":", 1)[0]
        try:
            return original_key_response(self, request, full_url)
        finally:
            _request.scheme = None

    get_permission.original = original_permission
    models.FakeBucket.get_permission = get_permission
    responses.S3Response._key_response = _key_response
