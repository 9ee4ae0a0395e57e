#!/usr/bin/env python3
"""The compute behind the local AWS API's Batch queues.

moto (the local AWS API) accepts Batch jobs but runs no containers: without
Docker it marks each job SUCCEEDED at once and names a CloudWatch log stream
for it that nobody writes. This program plays the containers' part: for
every job that ends, it writes into that log stream what the job's program
prints, taken from ``outputs/PROGRAM.txt`` beside this file (the first
PROGRAM whose name appears in the job's command or, for commands like
``bash -c "$TEST_CMD"``, in its environment's values), filled by the rule
``outputs/README`` gives (``fill`` below; the Kubernetes test driver,
tests/support/kube/emulated.rs, fills the same files by the same rule):
``${NAME}`` from the container's environment or the program's own
arguments (``${ARG1}`` …), integer arithmetic (``${ARG1 - 1}``), and lines
repeated (``${for E in 0..ARG1}`` … ``${end}``) or kept on a condition
(``${if E % ARG2 == 0}`` … ``${end}``). ``batch_compute.py --render FILE
[NAME=VALUE ...] -- COMMAND ...`` prints a file as a job would.

An NCCL test's figures are not the file's alone: they are scaled to the
fabric of the instance type the job's compute environment runs (the file
holds 2 x p4d.24xlarge; see FABRIC), and vary by a few percent from one run
to the next, as a real cluster's do. Its `NCCL INFO` lines (NCCL_DEBUG=INFO)
show NCCL on EFA through aws-ofi-nccl, with the type's EFA interface count
from providers/data/efa-instance-types.csv. A first line says the output is
emulated (`# flow local cloud: emulated ...`), which flow's readers keep
as the run's `emulated` value and `flow report` shows.

A multi-node parallel job's nodes (`JOBID#N`, which cloud_batch_mnp.py
gives moto's jobs) each get their own stream: what the node's container
prints (batch_nodes.py: each program its command names, in order, and the
faults a test plants on node N in the table $FLOW_TEST_FAULTS names; a
`train EPOCHS` command's main node is batch_training.py's training, which
puts its checkpoints in S3 and resumes from FLOW_RESUME_FROM).

It changes nothing else: the job's status, its tags and its log stream's
name are moto's. Run with the same endpoint and credentials as flow:

    batch_compute.py --endpoint http://127.0.0.1:PORT [--regions us-east-1,us-west-2]

It polls every 200 ms until killed and prints one line per job it ran.
"""

import argparse
import os
import random
import re
import sys
import time

import batch_nodes
import batch_training

OUTPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outputs")
LOG_GROUP = "/aws/batch/job"
ENDED = ("SUCCEEDED", "FAILED")


def programs():
    """The emulated programs: name → output template."""
    out = {}
    for entry in sorted(os.listdir(OUTPUTS)):
        if entry.endswith(".txt"):
            # newline="": a \r (tqdm's redraws) is the program's, kept.
            with open(os.path.join(OUTPUTS, entry), encoding="utf-8", newline="") as f:
                out[entry[: -len(".txt")]] = f.read()
    return out


def container_of(job, definition):
    """The command and environment the job's (main node's) container ran."""
    container = job.get("container") or {}
    command = container.get("command") or []
    env = {e["name"]: e["value"] for e in container.get("environment") or []}
    props = definition.get("nodeProperties") or {}
    for node in props.get("nodeRangeProperties") or []:
        c = node.get("container") or {}
        command = command or c.get("command") or []
        for e in c.get("environment") or []:
            env.setdefault(e["name"], e["value"])
    c = definition.get("containerProperties") or {}
    command = command or c.get("command") or []
    for e in c.get("environment") or []:
        env.setdefault(e["name"], e["value"])
    return command, env


# Bus bandwidth of an instance family's fabric relative to p4d.24xlarge's
# (4 x 100 Gb/s EFA): p5 and p6 have 3,200 Gb/s of EFA. Published 2-node
# all_reduce_perf peaks: 487 GB/s on p5.48xlarge against 45 GB/s on the
# p4d table (awsome-distributed-training, micro-benchmarks/nccl-tests).
FABRIC = {"p4d": 1.0, "p4de": 1.0, "p5": 10.8, "p5e": 10.8, "p5en": 10.8, "p6-b200": 10.8, "p6": 10.8}
BANDWIDTH_COLUMNS = (6, 7, 10, 11)  # algbw, busbw out of place; in place


# EFA interfaces per instance type: flow's one table of them.
EFA_TABLE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "providers", "data", "efa-instance-types.csv"
)


def efa_interfaces(instance_type):
    """The EFA interfaces of `instance_type` from flow's table, or None."""
    try:
        with open(EFA_TABLE, encoding="utf-8") as f:
            for line in f:
                name, _, count = line.strip().partition(",")
                if name == instance_type and count.isdigit():
                    return int(count)
    except OSError:
        pass
    return None


def scaled_nccl(text, factor, instance_type):
    """The nccl-tests table with each bandwidth times `factor` (and each
    time divided by it), the average too, marked as emulated; the
    aws-ofi-nccl lines name the instance type's EFA interface count."""
    rng = random.Random()
    out = [
        f"# flow local cloud: emulated all_reduce_perf on {instance_type}, "
        f"figures scaled x{factor:.2f} from a p4d table, varying per run"
    ]
    nics = efa_interfaces(instance_type)
    for line in text.splitlines():
        if line.startswith("# flow local cloud: emulated"):
            continue  # the file's own mark: the line above says more
        cells = line.split()
        if nics and "(found 4 nics)" in line:
            line = line.replace("(found 4 nics)", f"(found {nics} nics)")
        if len(cells) == 13 and cells[0].isdigit():
            wobble = factor * rng.uniform(0.97, 1.03)
            for i in BANDWIDTH_COLUMNS:
                cells[i] = f"{float(cells[i]) * wobble:.2f}"
            for i in (5, 9):
                cells[i] = f"{float(cells[i]) / wobble:.1f}"
            line = "".join(f"{c:>{w}}" for c, w in zip(cells, (12, 14, 10, 8, 8, 9, 8, 8, 7, 9, 8, 8, 7)))
        elif line.startswith("# Avg bus bandwidth"):
            value = float(line.split(":")[1]) * factor * rng.uniform(0.97, 1.03)
            line = f"# Avg bus bandwidth    : {value:.4f} "
        out.append(line)
    return "\n".join(out) + "\n"


# The fill of outputs/*.txt (outputs/README says the rule; the Kubernetes
# test driver's tests/support/kube/emulated.rs is the same rule in Rust).
PLACEHOLDER = re.compile(r"\$\{([^{}]*)\}")
BLOCK = re.compile(r"^\$\{(for|if|end)(?:\s+([^{}]*))?\}$")
FOR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+?)\.\.(.+)$")
COMPARE = re.compile(r"^(.+?)(==|!=|<=|>=|<|>)(.+)$")
OPS = ("+", "-", "*", "/", "%")
TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*|[0-9]+)|([-+*/%]))\s*")


def names_for(program, text, env):
    """The names a file is filled from: the container's environment, and
    ARG1, ARG2 … for the words after the first word naming `program` in
    `text` (its command, then its environment's values)."""
    names = dict(env)
    words = text.split()
    for i, word in enumerate(words):
        if program in word:
            for n, arg in enumerate(words[i + 1 :], start=1):
                names.setdefault(f"ARG{n}", arg)
            break
    return names


def evaluate(expr, names):
    """A placeholder's value: a name's value as is, or integer arithmetic on
    names and whole numbers (+ - * / %, / rounding down, * / % before + -);
    None when a name is unknown or not a whole number, or on a division by 0."""
    expr = expr.strip()
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", expr):
        return names.get(expr)
    pos, items = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            return None
        pos = m.end()
        items.append(m.group(1) or m.group(2))
    words, ops = items[0::2], items[1::2]
    if len(items) % 2 == 0 or any(op not in OPS for op in ops):
        return None
    numbers = []
    for word in words:
        if word in OPS:
            return None
        value = integer(word if word.isdigit() else names.get(word))
        if value is None:
            return None
        numbers.append(value)
    terms, op_of_term = [numbers[0]], []
    for op, n in zip(ops, numbers[1:]):
        if op in "*/%":
            if op != "*" and n == 0:
                return None
            last = terms[-1]
            terms[-1] = last * n if op == "*" else last // n if op == "/" else last % n
        else:
            op_of_term.append(op)
            terms.append(n)
    total = terms[0]
    for op, n in zip(op_of_term, terms[1:]):
        total = total + n if op == "+" else total - n
    return str(total)


def integer(value):
    """`value` as an integer when it is a whole number (`-?[0-9]+`), or None."""
    if value is None or not re.fullmatch(r"-?[0-9]+", value):
        return None
    return int(value)


def holds(condition, names):
    """Whether `A OP B` holds (OP one of == != < <= > >=, on integers), or
    None when either side has no value."""
    m = COMPARE.match(condition)
    if not m:
        return None
    a, b = integer(evaluate(m.group(1), names)), integer(evaluate(m.group(3), names))
    if a is None or b is None:
        return None
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[m.group(2)]


def fill_line(line, names):
    """`line` with each placeholder that has a value replaced by it."""

    def one(m):
        value = evaluate(m.group(1), names)
        return m.group(0) if value is None else value

    return PLACEHOLDER.sub(one, line)


def parse_blocks(lines, i=0, nested=False):
    """The lines from `i` as a tree: a line, or (kind, expression, header,
    body, end line) for a `${for …}` / `${if …}` block. A block without
    `${end}` runs to the end; an `${end}` outside a block is a line."""
    out = []
    while i < len(lines):
        m = BLOCK.match(lines[i])
        if m and m.group(1) == "end" and nested:
            return out, i
        if m and m.group(1) != "end":
            body, j = parse_blocks(lines, i + 1, True)
            end = lines[j] if j < len(lines) else None
            out.append((m.group(1), (m.group(2) or "").strip(), lines[i], body, end))
            i = j + 1
        else:
            out.append(lines[i])
            i += 1
    return out, i


def render(tree, names, out):
    """Appends the filled lines of `tree` to `out`."""
    for node in tree:
        if isinstance(node, str):
            out.append(fill_line(node, names))
            continue
        kind, expr, header, body, end = node
        if kind == "for":
            m = FOR.match(expr)
            lo = m and integer(evaluate(m.group(2), names))
            hi = m and integer(evaluate(m.group(3), names))
            if lo is not None and hi is not None:
                for i in range(lo, hi):
                    render(body, {**names, m.group(1): str(i)}, out)
                continue
        else:
            keep = holds(expr, names)
            if keep is not None:
                if keep:
                    render(body, names, out)
                continue
        # No value to repeat or judge by: the block as written, once.
        out.append(fill_line(header, names))
        render(body, names, out)
        if end is not None:
            out.append(end)


def fill(template, names):
    """An outputs/*.txt template filled from `names` (outputs/README)."""
    out = []
    render(parse_blocks(template.split("\n"))[0], names, out)
    return "\n".join(out)


def output_for(command, env, known, instance_type=None, slowdown=1.0):
    """What the program in `command` prints, or a note that none is known
    (an NCCL test's figures times `slowdown` too: a slow node's)."""
    text = " ".join(command + list(env.values()))
    for name, template in known.items():
        if name in text:
            filled = fill(template, names_for(name, text, env))
            if name == "all_reduce_perf" and instance_type:
                family = instance_type.split(".")[0]
                return scaled_nccl(filled, FABRIC.get(family, 1.0) * slowdown, instance_type)
            return filled
    return f"local cloud: no output is emulated for `{' '.join(command)}`\n"


def instance_type_of(batch, job, cache):
    """The first instance type of the compute environments behind the
    job's queue, or None."""
    queue = job.get("jobQueue")
    if queue in cache:
        return cache[queue]
    found = None
    try:
        for q in batch.describe_job_queues(jobQueues=[queue]).get("jobQueues", []):
            envs = [o["computeEnvironment"] for o in q.get("computeEnvironmentOrder", [])]
            for ce in batch.describe_compute_environments(computeEnvironments=envs).get(
                "computeEnvironments", []
            ):
                types = (ce.get("computeResources") or {}).get("instanceTypes") or []
                if types and not found:
                    found = types[0]
    except Exception:  # an emulator: no instance type, no scaling
        found = None
    cache[queue] = found
    return found


def write_log(logs, stream, text):
    """Puts `text` into the job's log stream, one event per line."""
    try:
        logs.create_log_group(logGroupName=LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    try:
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    now = int(time.time() * 1000)
    events = [
        {"timestamp": now + i, "message": line}
        for i, line in enumerate(text.splitlines())
        if line != ""
    ]
    for start in range(0, len(events), 1000):
        logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=events[start : start + 1000],
        )


def ended_jobs(batch):
    """Every ended job of every queue, as (id, queue) pairs."""
    for queue in batch.describe_job_queues().get("jobQueues", []):
        for status in ENDED:
            pages = batch.get_paginator("list_jobs").paginate(
                jobQueue=queue["jobQueueArn"], jobStatus=status
            )
            for page in pages:
                for summary in page.get("jobSummaryList", []):
                    yield summary["jobId"]


def hung_jobs(batch):
    """The ids of the jobs moto shows RUNNING: it ends every other job at
    once, so these are the multi-node jobs a node hangs in
    (cloud_batch_mnp.py)."""
    for queue in batch.describe_job_queues().get("jobQueues", []):
        pages = batch.get_paginator("list_jobs").paginate(jobQueue=queue["jobQueueArn"], jobStatus="RUNNING")
        for page in pages:
            for summary in page.get("jobSummaryList", []):
                yield summary["jobId"]


# Stalled jobs (`#N stalls`): (region, id) -> (main node's stream, the
# warning, when it was last appended).
STALLED = {}


def append_stalled(batch, logs):
    """Appends NCCL's warning to each stalled job of `batch`'s region to
    its main stream about every second while the job runs
    (batch_training.py)."""
    region = batch.meta.region_name
    for key, (stream, line, last) in list(STALLED.items()):
        if key[0] != region:
            continue
        job_id = key[1]
        jobs = batch.describe_jobs(jobs=[job_id])["jobs"]
        if not jobs or jobs[0].get("status") != "RUNNING":
            del STALLED[key]
        elif time.time() - last >= 1.0:
            write_log(logs, stream, line + "\n")
            STALLED[key] = (stream, line, time.time())


def run_once(batch, logs, done, known, types, s3=None):
    """Writes the logs of jobs that ended since the last pass, and of
    the hung ones (what they printed before they hung)."""
    append_stalled(batch, logs)
    fresh = [j for j in list(ended_jobs(batch)) + list(hung_jobs(batch)) if j not in done]
    for start in range(0, len(fresh), 100):
        for job in batch.describe_jobs(jobs=fresh[start : start + 100])["jobs"]:
            done.add(job["jobId"])
            kind = instance_type_of(batch, job, types)
            if job.get("nodeProperties") and not job.get("container"):
                # A multi-node job: its nodes ran the containers.
                write_node_logs(batch, logs, job, known, kind, s3)
                continue
            stream = (job.get("container") or {}).get("logStreamName")
            if not stream:
                continue
            defs = batch.describe_job_definitions(
                jobDefinitions=[job["jobDefinition"]]
            )["jobDefinitions"]
            command, env = container_of(job, defs[0] if defs else {})
            write_log(logs, stream, output_for(command, env, known, kind))
            print(
                f"ran {job['jobName']} ({job['jobId']}): {' '.join(command)[:80]}",
                flush=True,
            )


def write_node_logs(batch, logs, job, known, instance_type, s3=None):
    """Each node's stream of a multi-node parallel job (`JOBID#N`, as
    cloud_batch_mnp.py gives moto's jobs nodes): what its container prints
    (batch_nodes.py, with the faults planted on node N as `#N`; a `train`
    command's main node, batch_training.py)."""
    num = int((job.get("nodeProperties") or {}).get("numNodes") or 0)
    if num == 0:
        return
    ids = [f"{job['jobId']}#{i}" for i in range(num)]
    nodes = batch.describe_jobs(jobs=ids)["jobs"]
    def address(n):
        return ((n.get("container") or {}).get("networkInterfaces") or [{}])[0].get("privateIpv4Address", "")

    lost = [address(n) for n in nodes if (n.get("statusReason") or "").startswith("Host EC2 (instance ")]
    def hangs(n):
        faults = batch_nodes.faults_for([f"#{(n.get('nodeDetails') or {}).get('nodeIndex')}"])
        return "hangs" in faults or "stalls" in faults

    hung = [address(n) for n in nodes if job.get("status") == "RUNNING" and hangs(n)]
    for node in nodes:
        container = node.get("container") or {}
        stream = container.get("logStreamName")
        index = (node.get("nodeDetails") or {}).get("nodeIndex")
        if not stream or index is None:
            continue
        command = container.get("command") or []
        env = {e["name"]: e["value"] for e in container.get("environment") or []}
        if batch_training.epochs_of(command) is not None and s3 is not None:
            if (node.get("nodeDetails") or {}).get("isMainNode"):
                text = batch_training.run(
                    command, env, lost[0] if lost else None, s3, hung[0] if hung else None
                )
                stalls = [
                    n for n in nodes if "stalls" in batch_nodes.faults_for([f"#{(n.get('nodeDetails') or {}).get('nodeIndex')}"])
                ]
                if job.get("status") == "RUNNING" and stalls:
                    STALLED[(batch.meta.region_name, job["jobId"])] = (
                        stream,
                        batch_training.stalled_line(hung[0]),
                        time.time(),
                    )
            else:
                text = f"rank {index}: training with the main node\n"
            write_log(logs, stream, text)
            print(f"ran node {node['jobId']}: {' '.join(command)[:80]}", flush=True)
            continue
        text = batch_nodes.node_output(
            command,
            env,
            known,
            [f"#{index}"],
            instance_type,
            efa_interfaces(instance_type) if instance_type else None,
            lambda name, slowdown: output_for(command, env, {name: known[name]}, instance_type, slowdown),
        )
        write_log(logs, stream, text)
        print(f"ran node {node['jobId']}: {' '.join(command)[:80]}", flush=True)


def render_command(argv):
    """`--render FILE [NAME=VALUE ...] -- COMMAND ...`: prints FILE filled as
    for a job whose container runs COMMAND with that environment."""
    sep = argv.index("--") if "--" in argv else len(argv)
    path, pairs, command = argv[0], argv[1:sep], argv[sep + 1 :]
    env = dict(p.split("=", 1) for p in pairs)
    program = os.path.basename(path)[: -len(".txt")]
    with open(path, encoding="utf-8", newline="") as f:
        sys.stdout.write(fill(f.read(), names_for(program, " ".join(command + list(env.values())), env)))


def unmodelled(client):
    """`client` with every request marked `X-Flow-Model: off`: this emulator
    is the service's back end, not one of its callers, so the latency model
    (latency_model.py) neither holds what it reads nor counts its polling
    among the calls a bench reports (it was 552 of 668 in time-to-training's
    eks-p4d)."""

    def mark(request, **_):
        request.headers["X-Flow-Model"] = "off"

    client.meta.events.register("before-sign.*.*", mark)
    return client


def main():
    if sys.argv[1:2] == ["--render"]:
        return render_command(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument(
        "--regions",
        default="us-east-1,us-east-2,us-west-1,us-west-2",
        help="comma-separated regions whose queues to serve",
    )
    args = parser.parse_args()
    import boto3  # only the server needs it; --render does not
    import botocore.config

    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    clients = [
        (
            unmodelled(session.client("batch", endpoint_url=args.endpoint, region_name=r)),
            unmodelled(session.client("logs", endpoint_url=args.endpoint, region_name=r)),
            unmodelled(
                session.client(
                    "s3",
                    endpoint_url=args.endpoint,
                    region_name=r,
                    config=botocore.config.Config(s3={"addressing_style": "path"}),
                )
            ),
        )
        for r in args.regions.split(",")
        if r
    ]
    known = programs()
    done = set()
    types = {}
    while True:
        for batch, logs, s3 in clients:
            try:
                run_once(batch, logs, done, known, types, s3)
            except Exception as e:  # the server restarting, a job deleted meanwhile
                print(f"pass failed: {e}", file=sys.stderr, flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
