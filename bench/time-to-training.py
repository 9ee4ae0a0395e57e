#!/usr/bin/env python3
"""Time to first training step (issue 18); prints its figures.

For eks-p4d, batch-p5 and torchrec-eks, from bench/latency.toml:
  a) the runbook: the seed runbook's commands one after another;
  b) the critical path of flow's graph (each step's length from the table);
  c) flow's measured wall time from `flow apply` to the training step's
     start, against the test cloud with its latency model (every length
     divided by the table's scale, 60), converted back to real minutes.
It prints a/c, c/b, the graph's critical path, and for each operation the
model held: its describe calls against what a waiter polling every 15 s
would make, and how late flow noticed its end. Then it destroys what the
apply made and prints destroy's wall time against the critical path of the
reverse graph, with the model's delete lengths (a note, not judged).

Everything runs for real, as a user runs the workflow, with the workflow's
own files: every AWS step against moto through scripts/local-aws, paced by
its latency model (scripts/local-cloud/latency_model.py holds creates,
deletes and Batch jobs) and flow's waiters paced with FLOW_TIME_SCALE=1/60;
the Kubernetes steps against a real kube-apiserver that the local cloud's
EKS describes as the cluster's, whose driver holds each rollout and job for
its table length (bench/local_eks.rs); the image build's exec step runs the
workflow's own script with the tests' container tool, held for the build's
and the push's lengths. The training step's start is the figure: the bench
stops nothing early, so the training step runs too.

Usage: bench/time-to-training.py [--flow PATH] [--runs N] [--only eks-p4d,...] [--gantt FILE.svg] [--scale N]
Builds the release binary first unless --flow is given, and the Kubernetes
harness (debug profile) always. Prints the table of what it judged and exits
1 when a figure misses its target (bench/judge.py).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

from judge import Judge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "bench", "latency.toml")

# Each seed: its file, the training step, and the runbook's commands in
# order, each naming the workflow steps it does (steps in one command run
# together: eksctl makes the VPC, then the cluster, then its node groups in
# parallel).
SEEDS = {
    "eks-p4d": {
        "file": "eks-p4d.toml",
        "train": "train",
        "cluster": "eks-p4d",
        "vars": [],
        "env": {"HF_TOKEN": "hf_benchTokenNotASecret"},
        "runbook": [  # shared/seeds/eks-dlc-fsdp.md
            ["images", "image"],                  # 2: build.sh (build, push)
            ["vpc"], ["eks"], ["system_nodes|gpu_nodes"],  # 3: eksctl create cluster
            ["etcd"], ["training_operator"],      # 4: kubectl apply
            ["device_plugins"],
            ["fsx"], ["fsx_csi"], ["fsx_volume"], # 4: fsx_create.sh, fsx_deploy.sh, pvc
            ["nvidia_smi"], ["nccl"],             # 5: checks
            ["hf_token"],                         # 6: token, then fsdp.sh
        ],
    },
    "batch-p5": {
        "file": "batch-p5.toml",
        "train": "nccl",
        "cluster": None,
        "vars": [],
        "env": {},
        "runbook": [  # shared/seeds/aws-batch-distributed-training.md
            ["vpc"], ["bucket"], ["ssh"], ["batch"],
        ],
    },
    "torchrec-eks": {
        "file": "torchrec-eks.toml",
        "train": "train",
        "cluster": "torchrec-cluster",
        "vars": ["launcher=pytorchjob"],
        "env": {},
        "runbook": [  # shared/seeds/torchrec-on-eks.md
            ["vpc"], ["eks"], ["gpu_nodes"],      # eksctl create cluster
            ["device_plugins"],
            ["data_bucket"], ["upload"], ["fsx"], ["fsx_csi"], ["fsx_volume"],
            ["training_operator"], ["rendezvous"],
        ],
    },
}

def stack_seconds(table, template_text):
    section = table["cloudformation"]
    types = set(re.findall(r"AWS::[A-Za-z0-9]+::[A-Za-z0-9]+", template_text))
    return max([section[t] for t in types if t in section], default=section["default"])


def step_seconds(table, wd, step):
    """A step's real length from the table, as flow carries it out."""
    p = step["provider"]
    stacks = table["cloudformation"]
    ops = table["operations"]
    if p == "cloudformation.stack":
        template = step.get("inputs", {}).get("template", "")
        path = os.path.join(wd, template)
        return stack_seconds(table, open(path).read()) if os.path.exists(path) else stacks["default"]
    if p == "eks.cluster":
        oidc = stacks["AWS::IAM::OIDCProvider"] if step.get("inputs", {}).get("with_oidc") else 0
        # flow's role stack, the control plane, then the OIDC provider's stack.
        return stacks["AWS::IAM::Role"] + ops["eks.cluster"] + oidc
    if p == "eks.nodegroup":
        # flow's node role and launch template stack, then the node group.
        return stacks["AWS::IAM::Role"] + ops["eks.nodegroup"]
    if p in ("fsx.lustre", "batch.job"):
        return ops[p]
    if p == "exec":
        # The workflows' one exec step builds and pushes the training image.
        return table["steps"]["container.build"] + table["steps"]["container.push"]
    if p == "kube.manifest" and not rolls_out(wd, step):
        # Nothing that rolls out (a PersistentVolume and its claim, a
        # StorageClass): the driver holds nothing, and neither would a real
        # cluster for long; a one-call step, as the table's header says.
        return 1
    return table["steps"].get(p, 1)


# The kinds bench/local_eks.rs holds (tests/support/kube/pace.rs).
PACED_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "PyTorchJob", "MPIJob"}


def rolls_out(wd, step):
    """Whether a kube.manifest step's files hold a kind the driver paces (or
    cannot be read here, a folder or a URL: then the table's length holds)."""
    files = step.get("inputs", {}).get("files", [])
    for f in files if isinstance(files, list) else [files]:
        path = os.path.join(wd, f)
        if not os.path.isfile(path):
            return True
        kinds = set(re.findall(r"^kind:\s*(\w+)", open(path).read(), re.M))
        if kinds & PACED_KINDS:
            return True
    return False


def delete_seconds(table, step):
    """How long deleting a step takes in the model (0: one quick call)."""
    p = step["provider"]
    deletes = table.get("deletes", {})
    stack = deletes.get("cloudformation.stack", 0)
    if p == "cloudformation.stack":
        return stack
    if p == "eks.cluster":
        # The control plane, then flow's role stack (and the OIDC stack).
        return deletes.get("eks.cluster", 0) + stack * (2 if step.get("inputs", {}).get("with_oidc") else 1)
    if p == "eks.nodegroup":
        return deletes.get("eks.nodegroup", 0) + stack
    return deletes.get(p, 0)


def flatten(wf, wd):
    """The workflow's steps, a module's steps named `call_step` with its inputs put in."""
    steps = dict(wf.get("steps", {}))
    for call, mod in wf.get("modules", {}).items():
        with open(os.path.join(wd, mod["source"], "main.toml")) as f:
            text = f.read()
        for key, value in mod.get("inputs", {}).items():
            text = text.replace("${inputs.%s}" % key, str(value))
        inner = tomllib.loads(text).get("steps", {})
        for name, step in inner.items():
            step = json.loads(re.sub(r"steps\.([a-z_0-9]+)\.", lambda m: f"steps.{call}_{m.group(1)}.",
                                     json.dumps(step)))
            step["depends_on"] = [f"{call}_{d}" for d in step.get("depends_on", [])]
            step["short"] = name
            step["flow_name"] = f"{call}.{name}"
            steps[f"{call}_{name}"] = step
    return steps


def dependencies(steps, name):
    step = steps[name]
    refs = set(step.get("depends_on", []))
    text = json.dumps({k: v for k, v in step.items() if k != "depends_on"})
    for m in re.finditer(r"steps\.([A-Za-z_0-9-]+)", text):
        if m.group(1) in steps and m.group(1) != name:
            refs.add(m.group(1))
    return sorted(refs)


def critical_path(steps, deps, length):
    finish, via = {}, {}

    def end(n):
        if n not in finish:
            start = max((end(d) for d in deps[n]), default=0.0)
            via[n] = max(deps[n], key=lambda d: finish[d], default=None)
            finish[n] = start + length[n]
        return finish[n]

    for n in steps:
        end(n)
    return finish, via


def reverse_critical_path(steps, deps, length):
    """When destroy can be done: each step is deleted after every step
    that depends on it."""
    dependents = {n: [m for m in steps if n in deps[m]] for n in steps}
    finish = {}

    def end(n):
        if n not in finish:
            finish[n] = max((end(d) for d in dependents[n]), default=0.0) + length[n]
        return finish[n]

    return max((end(n) for n in steps), default=0.0)


def chain(via, name):
    out = []
    while name:
        out.append(name)
        name = via[name]
    return list(reversed(out))


def minutes(s):
    return f"{s / 60:5.1f} min"


def harness():
    """Builds bench/local_eks.rs (the tests' Kubernetes harness) and returns its path.

    Release, like the flow binary the bench times: in bench/all's clean
    release target folder (CARGO_TARGET_DIR) only the harness itself is
    compiled, every dependency is already there."""
    out = subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow", "--bench", "local_eks",
                          "--message-format=json"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "local_eks" and m.get("executable"):
            return m["executable"]
    sys.exit("bench/local_eks.rs: cargo built no executable")


def container_tool(out, table):
    """The tests' container tool, each build and push held for its table length."""
    path = os.path.join(out, "container-tool")
    build = table["steps"]["container.build"] / table["scale"]
    push = table["steps"]["container.push"] / table["scale"]
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                f'case "$1" in build) sleep {build:.3f} ;; push) sleep {push:.3f} ;; esac\n'
                f'exec "{ROOT}/tests/fixtures/bin/container-tool" "$@"\n')
    os.chmod(path, 0o755)
    return path


def run_seed(flow, k8s, seed, spec, table, wd, gantt):
    with open(os.path.join(wd, spec["file"]), "rb") as f:
        wf = tomllib.load(f)
    steps = flatten(wf, wd)
    deps = {n: dependencies(steps, n) for n in steps}
    names = {steps[n].get("short", n): n for n in steps}
    train = names[spec["train"]]
    length = {n: step_seconds(table, wd, steps[n]) for n in steps}
    finish, via = critical_path(steps, deps, length)
    b = finish[train] - length[train]
    a = 0.0
    for command in spec["runbook"]:
        a += max(length[names[s]] for part in command for s in part.split("|"))
    e = reverse_critical_path(steps, deps, {n: delete_seconds(table, steps[n]) for n in steps})

    out = tempfile.mkdtemp(prefix="flow-ttt-")
    path = os.path.join(wd, spec["file"])
    args = [f"--var={v}" for v in spec["vars"]]
    if any(st["provider"] == "exec" for st in steps.values()):
        args.append(f"--var=container_tool={container_tool(out, table)}")
    env = {**os.environ, **spec["env"], "NO_COLOR": "1", "FLOW_TIME_SCALE": f"1/{table['scale']:g}",
           "FLOW_LATENCY_MODEL": TABLE, "FLOW_LATENCY_SCALE": f"{table['scale']:g}",
           "PATH": os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ.get("PATH", "")}
    report = ('python3 -c "import os,sys,urllib.request;open(sys.argv[1],\'wb\').write(urllib.request.urlopen('
              'os.environ[\'AWS_ENDPOINT_URL\']+\'/moto-api/flow-latency/report\').read())"')
    script = (
        'set -e; flow=$1 wf=$2 out=$3; shift 3; '
        '"$flow" apply "$wf" --auto-approve -q "$@" > "$out/apply.log" 2>&1 || { cat "$out/apply.log"; exit 1; }; '
        f'{report} "$out/model.json"; cp "$(dirname "$wf")/.flow/$(basename "$wf" .toml)/last-run.json" "$out/apply-run.json"; '
        'start=$(date +%s.%N); '
        '"$flow" destroy "$wf" --auto-approve -q "$@" > "$out/destroy.log" 2>&1 || { cat "$out/destroy.log"; exit 1; }; '
        'echo "$start $(date +%s.%N)" > "$out/destroy.span"; '
        f'{report} "$out/model-destroy.json"'
    )
    command = ["bash", "-c", script, "-", flow, path, out, *args]
    if spec["cluster"]:
        command = [k8s, "--cluster", spec["cluster"], "--latency", TABLE, "--", *command]
    proc = subprocess.run([os.path.join(ROOT, "scripts", "local-aws"), *command],
                          cwd=wd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{seed}: apply or destroy failed:\n{proc.stdout}\n{proc.stderr}")
    with open(os.path.join(out, "apply-run.json")) as f:
        last = json.load(f)
    # flow names a module's step CALL.STEP (this bench: CALL_STEP), and each
    # instance of a for_each step STEP["KEY"]: an instance stands for its step.
    ours = {st.get("flow_name", n): n for n, st in steps.items()}
    for st in last["steps"]:
        name = re.sub(r'\[".*"\]$', "", st["step"])
        st["step"] = ours.get(name, name)
    with open(os.path.join(out, "model.json")) as f:
        report = json.load(f)
    with open(os.path.join(out, "model-destroy.json")) as f:
        deleted = [h for h in json.load(f)["held"] if h["kind"].endswith(" delete")]
    with open(os.path.join(out, "destroy.span")) as f:
        t0, t1 = (float(x) for x in f.read().split())
    span = {s["step"]: s for s in last["steps"]}
    c = (span[train]["start_ms"] - last["started_ms"]) / 1000.0 * table["scale"]
    # Before the first step starts: flow's start-up and plan, scaled x60 too.
    startup = (min(s["start_ms"] for s in last["steps"]) - last["started_ms"]) / 1000.0 * table["scale"]
    if gantt:
        subprocess.run([flow, "report", path, "-o", os.path.join(out, "report.html")], cwd=wd,
                       capture_output=True)
    return {"a": a, "b": b, "c": c, "d": (t1 - t0) * table["scale"], "e": e, "deleted": deleted,
            "startup": startup, "path": chain(via, train), "length": length, "report": report,
            "spans": last, "deps": deps, "out": out, "scale": table["scale"]}


# Operations whose length flow cannot know before they end.
UNKNOWN_LENGTH = {"batch.job"}


def unknown_schedule_looks(length):
    """The looks of flow's unknown-length schedule at an operation that
    ends after `length` seconds: at once, then after 2 s, each pause half
    as long again up to 15 s, until a look after the end."""
    t, pause, looks = 0.0, 2.0, 1
    while t < length:
        t += pause
        pause = min(pause * 1.5, 15.0)
        looks += 1
    return looks


def print_seed(seed, r, judge):
    a, b, c = r["a"], r["b"], r["c"]
    print(f"{seed}")
    print(f"  a) runbook, one command after another   {minutes(a)}")
    print(f"  b) critical path of flow's graph         {minutes(b)}   "
          + " -> ".join(f"{n} ({r['length'][n] / 60:.1f})" for n in r["path"][:-1]))
    print(f"  c) flow under the model (x{r['scale']:g})       {minutes(c)}")
    lagged = (c - r["startup"]) / b
    # c counts from the run's start as flow records it (after its plan).
    print(f"  a/c = {a / c:.2f}   c/b = {c / b:.3f}  (c/b after flow's start-up {lagged:.3f})")
    judge.at_most(f"{seed}: c/b (flow under the model / critical path, after start-up)", lagged, 1.03)
    judge.note(f"{seed}: a/c (runbook / flow)", f"{a / c:.2f}")
    print("  operation                               length  describes  allowed      noticed late")
    print("  (allowed: a 15-s waiter's looks; for a job, whose length flow cannot expect, its unknown-length schedule's)")
    worst = True
    for h in sorted(r["report"]["held"] + r["deleted"], key=lambda h: h["created"]):
        real = h["seconds"] * r["scale"]
        # A job runs as long as its program: flow cannot expect its length
        # and looks on its unknown-length schedule (2 s growing by half to
        # 15 s: providers/src/aws/pacing.rs), which is what it is held to.
        waiter = unknown_schedule_looks(real) if h["kind"] in UNKNOWN_LENGTH else int(real // 15) + 1
        late = ((h["first_seen_ready"] or h["ready"]) - h["ready"]) * r["scale"]
        ok = h["looks"] <= waiter
        worst &= ok
        print(f"    {h['kind'] + ' ' + h['name']:<38} {real / 60:5.1f} min {h['looks']:6d}   {waiter:8d}"
              f"      {late:5.1f} s ({late / real:.1%}){'' if ok else '  OVER'}")
    print("  the critical path as run (x{:g}): step, start after its last dependency ended, length run / table".format(r["scale"]))
    span = {s["step"]: s for s in r["spans"]["steps"]}
    t0 = r["spans"]["started_ms"]
    prev_end = None
    for n in r["path"]:
        s = span.get(n)
        if not s or s.get("end_ms") is None:
            continue
        start = (s["start_ms"] - t0) / 1000.0 * r["scale"]
        run = (s["end_ms"] - s["start_ms"]) / 1000.0 * r["scale"]
        gap = start - prev_end if prev_end is not None else start
        print(f"    {n:<24} +{gap:5.1f} s   {run / 60:5.2f} / {r['length'][n] / 60:5.2f} min  ({run - r['length'][n]:+.1f} s)")
        prev_end = (s["end_ms"] - t0) / 1000.0 * r["scale"]
    d, e = r["d"], r["e"]
    print(f"  d) flow destroy under the model          {minutes(d)}")
    print(f"  e) critical path of the reverse graph    {minutes(e)}   d/e = {d / e:.3f}" if e else
          f"  e) critical path of the reverse graph    {minutes(e)}")
    if e:
        judge.note(f"{seed}: d/e (destroy under the model / its critical path)", f"{d / e:.3f}")
    calls = r["report"]["calls"]
    print(f"  API calls: {sum(calls.values())} in all; "
          + ", ".join(f"{k} {v}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:8]))
    judge.check(f"{seed}: describe calls of each held operation", "all within" if worst else "some over",
                "<= a 15-s waiter's (a job's: its schedule's)", worst)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flow")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", default=",".join(SEEDS))
    ap.add_argument("--gantt", help="write the eks-p4d run's flow report (with its Gantt) here")
    ap.add_argument("--scale", type=float,
                    help="divide the table's lengths by this instead of its `scale` (a smaller one shrinks what "
                         "the model's own call latency adds, at the cost of a longer run)")
    ap.add_argument("--dump", help="write the last run's spans and the model's report (with every call) here")
    a = ap.parse_args()
    if not a.flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
    flow = os.path.abspath(a.flow) if a.flow else os.path.join(ROOT, "target", "release", "flow")
    k8s = harness()
    with open(TABLE, "rb") as f:
        table = tomllib.load(f)
    if a.scale:
        table["scale"] = a.scale
    judge = Judge("time-to-training")
    print(f"time to first training step, latency model {os.path.relpath(TABLE, ROOT)} (lengths / {table['scale']:g})")
    for seed in a.only.split(","):
        for i in range(a.runs):
            work = tempfile.mkdtemp(prefix="flow-ttt-wf-")
            wd = os.path.join(work, "workflows")
            shutil.copytree(os.path.join(ROOT, "workflows"), wd)
            try:
                r = run_seed(flow, k8s, seed, SEEDS[seed], table, wd, a.gantt and seed == "eks-p4d")
                print_seed(seed if a.runs == 1 else f"{seed} (run {i + 1})", r, judge)
                if a.dump:
                    with open(a.dump, "w") as f:
                        json.dump({k: r[k] for k in ("spans", "report", "path", "length", "scale")}, f)
                if a.gantt and seed == "eks-p4d":
                    shutil.copy(os.path.join(r["out"], "report.html"), a.gantt)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    judge.finish()


if __name__ == "__main__":
    main()
