"""The latency model's S3: every S3 call answers no sooner than AWS's S3 would.

moto answers an S3 call on loopback in a millisecond or two, whatever the
object's size; AWS's S3 does not. With the table's `[s3]` rows (bench/
latency.toml, each figure's source cited there) and FLOW_LATENCY_S3=1 in the
server's environment, each S3 call takes at least

    first_byte + (bytes sent + bytes answered) / throughput

seconds from its arrival: `first_byte` for any request (GetObject,
PutObject with or without If-Match / If-None-Match, ListObjectsV2,
DeleteObject, HeadObject, the bucket's location and versioning), and the
body's transfer at one connection's throughput (a request is one
connection). moto's own time counts towards it: the answer is held only for
what is left. `scale` does not touch these figures: flow's calls to its
state take wall time at any scale.

The bytes each S3 operation sent are counted (the report's "bytes_in", by
the same operation names as "calls"): the bench's bytes written per apply.
"""

import os
import time

SWITCH = "FLOW_LATENCY_S3"


def from_table(table):
    """An S3Latency for the table's `[s3]` rows, or None when the table has
    none or the environment does not ask for it."""
    rows = table.get("s3")
    if not rows or os.environ.get(SWITCH) != "1":
        return None
    return S3Latency(rows)


class S3Latency:
    """The table's first-byte latency and per-connection throughput."""

    def __init__(self, rows):
        self.first_byte = float(rows["first_byte"])
        self.throughput = float(rows["throughput"])

    def seconds(self, sent, answered):
        """How long a call sending `sent` bytes and answering `answered`
        bytes takes at least."""
        return self.first_byte + (sent + answered) / self.throughput

    def hold(self, arrived, sent, answered, now=None):
        """Sleeps until the call that arrived at `arrived` has taken what the
        table says it takes."""
        now = time.time() if now is None else now
        left = arrived + self.seconds(sent, answered) - now
        if left > 0:
            time.sleep(left)


def sent_bytes(environ):
    """The bytes of an S3 request's body: the decoded length of an
    aws-chunked upload, else its Content-Length."""
    for name in ("HTTP_X_AMZ_DECODED_CONTENT_LENGTH", "CONTENT_LENGTH"):
        value = environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 0
