"""The local cloud over HTTPS too, beside its plain HTTP port.

AWS's endpoints speak only TLS
(https://docs.aws.amazon.com/general/latest/gr/rande.html: every service
endpoint is `https://`), and what clients send over it is what IAM's
`aws:SecureTransport` key says ("true" over TLS: see
cloud_pcluster_s3policy.py). ParallelCluster puts a policy on its bucket
that denies every request not made over TLS, so a client that talks to the
local cloud over plain HTTP is refused there, as AWS would refuse it.

With FLOW_LOCAL_CLOUD_HTTPS=ADDRESS:PORT, FLOW_LOCAL_CLOUD_TLS_CERT and
FLOW_LOCAL_CLOUD_TLS_KEY (PEM files: a certificate for ADDRESS, made by
the harness with a test CA of its own), moto's server also answers on
https://ADDRESS:PORT, with the same backends as its HTTP port (the same
process, another listener). Clients trust it the way they trust a private
CA on AWS's side of a proxy: `AWS_CA_BUNDLE` (boto3 and the AWS CLI; flow
reads it too: "Environment variables to configure the AWS CLI",
https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-envvars.html).
The plain HTTP port stays for the harness's own calls. Unset: nothing
changes.
"""

import os
import sys
import threading


def install():
    """Starts the HTTPS listener when FLOW_LOCAL_CLOUD_HTTPS is set."""
    where = os.environ.get("FLOW_LOCAL_CLOUD_HTTPS")
    if not where:
        return
    cert = os.environ["FLOW_LOCAL_CLOUD_TLS_CERT"]
    key = os.environ["FLOW_LOCAL_CLOUD_TLS_KEY"]
    host, port = where.rsplit(":", 1)

    def serve():
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import run_simple

        app = DomainDispatcherApplication(create_backend_app)
        app.debug = True
        try:
            run_simple(
                host,
                int(port),
                app,
                threaded=True,
                ssl_context=(cert, key),
                request_handler=MotoRequestHandler,
            )
        except Exception as e:  # said in moto's log; the HTTP port goes on
            print("cloud_https: https://%s: %s" % (where, e), file=sys.stderr)

    threading.Thread(target=serve, name="https", daemon=True).start()
