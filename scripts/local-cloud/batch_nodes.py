"""What each node of a Batch multi-node parallel job prints, for
batch_compute.py (beside this file), with faults a test plants by node.

AWS Batch runs an MNP job as one container per node, each a job of its own
(`JOBID#N`) logging to its own CloudWatch Logs stream
(https://docs.aws.amazon.com/batch/latest/userguide/multi-node-parallel-jobs.html,
https://docs.aws.amazon.com/batch/latest/userguide/using_awslogs.html;
cloud_batch_mnp.py gives moto's jobs those nodes). A node's container here
prints, for each program its command names, in the order it names them,
what that program prints on a healthy node of the compute environment's
instance type:

- `nvidia-smi`: outputs/nvidia-smi.txt (8 GPUs);
- `fi_info`: one `fi_info -p efa -t FI_EP_RDM` record per EFA device, in
  the published form (providers/src/fleet/testdata/fi_info-efa-p4d.txt),
  as many as the instance type has EFA interfaces
  (providers/data/efa-instance-types.csv);
- `dcgmi`: the published `dcgmi diag -r 2` table, every test passing
  (providers/src/fleet/testdata/dcgmi-diag-r2-p4de.txt);
- any other program of outputs/ as batch_compute.py prints it for a job.

The fault table is the one the local Slurm fleet's stand-ins read
(tests/fixtures/slurm/fleet/: lines "NODE KEY VALUE", in the file
$FLOW_TEST_FAULTS names, read at each job): here NODE is `#N`, node N of
any multi-node job (Batch's `JOBID#N`). KEY is as there:
`gpus N` (nvidia-smi lists GPUs 0 to N-1), `nvidia-smi FILE` (nvidia-smi
prints FILE instead), `efa N` (fi_info lists N devices; 0 prints
libfabric's "no data" answer), `dcgm TEST` (that test's row fails, TEST a
name with `_` for ` `, e.g. GPU_Memory), `busbw F` (an NCCL test's
figures, all_reduce_perf's, times F: a slow node). `dies K` (node N's
host is lost in each of the next K multi-node jobs), `hangs K` (its
rank stops answering: the job stays RUNNING) and `stalls K` (the same,
NCCL's warnings printed on) are read by the server,
cloud_batch_mnp.py, started with the same $FLOW_TEST_FAULTS.
"""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
DCGM_TABLE = os.path.join(HERE, "..", "..", "providers", "src", "fleet", "testdata", "dcgmi-diag-r2-p4de.txt")
STAND_INS = ("nvidia-smi", "fi_info", "dcgmi")
GPU_ROW = re.compile(r"^\|\s+([0-9]+)\s+NVIDIA")


def faults_for(keys):
    """The fault table's entries for a node known by any of `keys`:
    KEY → VALUE (the first line of each KEY wins)."""
    path = os.environ.get("FLOW_TEST_FAULTS")
    out = {}
    if not path or not os.path.isfile(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if len(words) >= 3 and words[0] in keys:
                out.setdefault(words[1], " ".join(words[2:]))
    return out


def nvidia_smi(template, faults):
    """outputs/nvidia-smi.txt less the GPUs `gpus N` removes, or the file
    `nvidia-smi FILE` names."""
    if "nvidia-smi" in faults:
        with open(faults["nvidia-smi"], encoding="utf-8") as f:
            return f.read()
    keep = int(faults.get("gpus", "8"))
    lines = []
    for line in template.splitlines():
        m = GPU_ROW.match(line)
        if m and int(m.group(1)) >= keep:
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def fi_info(devices, faults):
    """`fi_info -p efa -t FI_EP_RDM` on a node with `devices` EFA devices
    (or `efa N`'s)."""
    devices = int(faults.get("efa", devices or 0))
    if devices == 0:
        return "fi_getinfo: -61 (No data available)\n"
    return "".join(
        f"provider: efa\nfabric: EFA-fe80::c6e:8fff:fef6:e7{i:02x}\ndomain: efa_{i}-rdm\n"
        f"version: 111.0\ntype: FI_EP_RDM\nprotocol: FI_PROTO_EFA\n"
        for i in range(devices)
    )


def dcgmi(faults):
    """The published `dcgmi diag -r 2` table (without its prompt line), the
    test `dcgm TEST` names failing on GPU 5."""
    with open(DCGM_TABLE, encoding="utf-8") as f:
        lines = f.read().splitlines()[1:]
    failing = faults.get("dcgm", "").replace("_", " ")
    out = []
    for line in lines:
        if failing and line.startswith(f"| {failing} "):
            out.append(f"| {failing:<25} | {'Fail - GPU: 5':<46} |")
            out.append(f"| {'Error':<25} | {'GPU 5 failed the test on this node (planted b':<46} |")
            out.append(f"| {'':<25} | {'y the test fleet)':<46} |")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def named_programs(text, names):
    """The programs of `names` that `text` names, in the order it first
    names them."""
    found = [(text.find(n), n) for n in names if n in text]
    return [n for _, n in sorted(found)]


def node_output(command, env, known, keys, instance_type, efa_devices, other):
    """What a node whose container runs `command` with `env` prints: each
    program it names, in order (`other(name, slowdown)` prints one of outputs/ that is
    not a stand-in here, given its `busbw` fault's factor). `keys` name the
    node in the fault table."""
    text = " ".join(command + list(env.values()))
    faults = faults_for(keys)
    programs = named_programs(text, list(STAND_INS) + [n for n in known if n not in STAND_INS])
    if not programs:
        return f"local cloud: no output is emulated for `{' '.join(command)}`\n"
    out = []
    for name in programs:
        if name == "nvidia-smi":
            out.append(nvidia_smi(known["nvidia-smi"], faults))
        elif name == "fi_info":
            out.append(fi_info(efa_devices, faults))
        elif name == "dcgmi":
            out.append(dcgmi(faults))
        else:
            out.append(other(name, float(faults.get("busbw", "1"))))
    return "".join(o if o.endswith("\n") else o + "\n" for o in out)
