#!/usr/bin/env python3
"""flow beside Terraform: the same work, against the same local AWS API, in one run.

Three workloads, each written once for each tool:

- `buckets`: N S3 buckets (flow: `s3.bucket` with `block_public_access =
  false`, so each is one CreateBucket as Terraform's `aws_s3_bucket` is;
  Terraform: one `aws_s3_bucket` each);
- `secrets`: N Secrets Manager secrets holding a value (flow: one
  `secretsmanager.secret` each; Terraform: `aws_secretsmanager_secret` with
  `recovery_window_in_days = 0`, as flow deletes, plus the
  `aws_secretsmanager_secret_version` that holds the value: Terraform needs
  two resources for one secret with a value);
- `stacks`: M CloudFormation stacks from one small template (flow:
  `cloudformation.stack`; Terraform: `aws_cloudformation_stack`).

Each tool runs each workload against its own fresh moto server (moto's own
server, started here from .venv, so neither sees the other's objects), and
every request a tool sends is counted by operation inside that server (a
WSGI layer in front of moto's dispatcher; the counts and the objects moto
holds are read back through paths the layer answers itself, uncounted).
For each workload the bench times, one run each:

1. apply (both at parallelism 10: Terraform's default and flow's
   `apply --parallelism` default, engine/src/cli/args.rs);
2. plan with refresh: flow at its default 16 reads at once, Terraform at
   its default 10 and at flow's 16, and flow at Terraform's 10;
3. plan without refresh (`flow plan --refresh=false`,
   `terraform plan -refresh=false`);
4. destroy (both at 10);

and prints wall time and requests sent for each tool, and Terraform / flow.

Then the kill test: for each tool and workload, on a fresh server, apply is
started and killed with SIGKILL (its whole process group: Terraform and its
provider plugin; flow) at 0.25, 0.5 and 0.75 of that tool's own apply wall
from step 1; the bench then counts the objects moto holds and the objects
in state (`terraform state list`, `flow state list`), applies again with no
manual step in between, and reports whether that apply succeeded, the
first error line if not (Terraform #20718: objects made but not recorded
fail with "already exists"), and the counts after it.

Judged (bench/judge.py): flow's second apply after every kill succeeds and
leaves exactly the workload's objects at moto and in state. Everything else
(the walls, the requests, Terraform's outcomes) is printed as a figure with
no target: this is a comparison, not a goal.

Needs Terraform (`terraform` on PATH, or --terraform) and the AWS provider
(5.x) in a local filesystem mirror (--tf-mirror, default
$FLOW_TF_MIRROR or /opt/tf-plugins, holding
registry.terraform.io/hashicorp/aws/VERSION/linux_amd64/terraform-provider-aws_*),
and moto in .venv (`scripts/local-aws true` installs it). Without one of
them it says which and how to provide it, and exits 2.

Usage: bench/peer-terraform.py [--flow PATH] [--terraform PATH] [--tf-mirror DIR]
                               [--objects N] [--stacks M] [--only buckets,secrets,stacks]
                               [--fractions 0.25,0.5,0.75] [--no-kill] [--keep DIR]
Builds the release binary first unless --flow is given.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judge import Judge  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
TEMPLATE = '{"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}\n'
WORKLOADS = ["buckets", "secrets", "stacks"]
DEFAULT_MIRROR = "/opt/tf-plugins"
PROVIDER = "registry.terraform.io/hashicorp/aws"

from peer_moto import Moto  # noqa: E402


def diff(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


# ---------------------------------------------------------------- workloads

def names(kind, n):
    return [f"peer-{kind[:-1]}-{i}" for i in range(n)]


def flow_workflow(kind, n):
    out = [f'[workflow]\nname = "peer-{kind}"\nregion = "us-east-1"\n']
    for i, name in enumerate(names(kind, n)):
        if kind == "buckets":
            out.append(f'[steps.b{i}]\nprovider = "s3.bucket"\n'
                       f'[steps.b{i}.inputs]\nname = "{name}"\nblock_public_access = false\n')
        elif kind == "secrets":
            out.append(f'[steps.s{i}]\nprovider = "secretsmanager.secret"\n'
                       f'[steps.s{i}.inputs]\nname = "{name}"\nvalue = "v{i}"\n')
        else:
            out.append(f'[steps.k{i}]\nprovider = "cloudformation.stack"\n'
                       f'[steps.k{i}.inputs]\nstack_name = "{name}"\ntemplate = "t.json"\n')
    return "".join(out)


def terraform_config(kind, n, endpoint):
    head = f'''terraform {{
  required_providers {{
    aws = {{ source = "hashicorp/aws" }}
  }}
}}

provider "aws" {{
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  s3_use_path_style           = true
  endpoints {{
    s3             = "{endpoint}"
    secretsmanager = "{endpoint}"
    cloudformation = "{endpoint}"
    sts            = "{endpoint}"
  }}
}}

locals {{
  names = [for i in range({n}) : "peer-{kind[:-1]}-${{i}}"]
}}
'''
    if kind == "buckets":
        body = '''
resource "aws_s3_bucket" "b" {
  count  = length(local.names)
  bucket = local.names[count.index]
}
'''
    elif kind == "secrets":
        body = '''
resource "aws_secretsmanager_secret" "s" {
  count                   = length(local.names)
  name                    = local.names[count.index]
  recovery_window_in_days = 0
}

resource "aws_secretsmanager_secret_version" "s" {
  count         = length(local.names)
  secret_id     = aws_secretsmanager_secret.s[count.index].id
  secret_string = "v${count.index}"
}
'''
    else:
        body = '''
resource "aws_cloudformation_stack" "k" {
  count         = length(local.names)
  name          = local.names[count.index]
  template_body = file("${path.module}/t.json")
}
'''
    return head + body


# ---------------------------------------------------------------- Terraform

def find_provider(mirror):
    pattern = os.path.join(mirror, PROVIDER, "*", "linux_amd64", "terraform-provider-aws_*")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else None


def preflight(args):
    """Terraform and its AWS provider, or a message naming what is missing."""
    tf = args.terraform or shutil.which("terraform")
    how = ("install Terraform (>= 1.5; a release binary on PATH, or --terraform PATH) and put the "
           "AWS provider in a filesystem mirror: DIR/registry.terraform.io/hashicorp/aws/VERSION/"
           "linux_amd64/terraform-provider-aws_vVERSION_x5 (`terraform providers mirror DIR` on a "
           "machine that can reach the registry writes that layout), then --tf-mirror DIR or "
           "FLOW_TF_MIRROR=DIR")
    if not tf or not os.access(tf, os.X_OK):
        print(f"peer-terraform: Terraform is not installed (no `terraform` on PATH); {how}", file=sys.stderr)
        sys.exit(2)
    provider = find_provider(args.tf_mirror)
    if not provider:
        print(f"peer-terraform: the Terraform AWS provider is not in the mirror {args.tf_mirror} "
              f"(no {PROVIDER}/*/linux_amd64/terraform-provider-aws_*); {how}", file=sys.stderr)
        sys.exit(2)
    if not os.path.exists(VENV_PY) or subprocess.run([VENV_PY, "-c", "import moto.server"],
                                                     capture_output=True).returncode != 0:
        print("peer-terraform: moto is not installed in .venv: run `scripts/local-aws true` once",
              file=sys.stderr)
        sys.exit(2)
    proc = subprocess.run([tf, "version", "-json"], capture_output=True, text=True,
                          env={**os.environ, "CHECKPOINT_DISABLE": "1"})
    try:
        tf_version = json.loads(proc.stdout)["terraform_version"]
    except (ValueError, KeyError):
        print(f"peer-terraform: `{tf} version -json` did not run (exit {proc.returncode}): "
              f"{(proc.stderr or proc.stdout).strip()[:400]}; {how}", file=sys.stderr)
        sys.exit(2)
    if tuple(int(x) for x in re.findall(r"\d+", tf_version)[:2]) < (1, 5):
        print(f"peer-terraform: Terraform {tf_version} is too old (the bench needs >= 1.5); {how}",
              file=sys.stderr)
        sys.exit(2)
    provider_version = provider.split(os.sep)[-3]
    return tf, tf_version, provider_version


class Terraform:
    def __init__(self, tf, mirror, work):
        self.tf = tf
        self.rc = os.path.join(work, "terraformrc")
        with open(self.rc, "w") as f:
            f.write(f'provider_installation {{\n  filesystem_mirror {{\n    path    = "{mirror}"\n'
                    f'    include = ["{PROVIDER}"]\n  }}\n  direct {{\n    exclude = ["{PROVIDER}"]\n  }}\n}}\n')
        self.cache = os.path.join(work, "plugin-cache")
        os.makedirs(self.cache, exist_ok=True)

    def env(self, moto, work):
        return {**moto.env(work), "TF_CLI_CONFIG_FILE": self.rc, "TF_PLUGIN_CACHE_DIR": self.cache}

    def init(self, d, env):
        proc = subprocess.run([self.tf, "init", "-input=false", "-no-color"], cwd=d, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            text = proc.stdout + proc.stderr
            if "provider" in text.lower():
                piece = f"the AWS provider ({PROVIDER}) could not be installed from the mirror"
            else:
                piece = "Terraform itself"
            errors = [l for l in text.splitlines() if "Error" in l or "error" in l][:3]
            print(f"peer-terraform: `terraform init` failed: {piece}:\n  " + "\n  ".join(errors or text.splitlines()[-5:]),
                  file=sys.stderr)
            sys.exit(2)

    def apply_cmd(self, p=10):
        return [self.tf, "apply", "-auto-approve", "-input=false", "-no-color", f"-parallelism={p}"]

    def plan_cmd(self, refresh=True, p=10):
        return [self.tf, "plan", "-input=false", "-no-color", "-detailed-exitcode",
                f"-parallelism={p}"] + ([] if refresh else ["-refresh=false"])

    def destroy_cmd(self, p=10):
        return [self.tf, "destroy", "-auto-approve", "-input=false", "-no-color", f"-parallelism={p}"]

    def state(self, d, env):
        proc = subprocess.run([self.tf, "state", "list", "-no-color"], cwd=d, env=env,
                              capture_output=True, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.strip()]
        counts = {}
        for l in lines:
            kind = l.split("[")[0]
            counts[kind] = counts.get(kind, 0) + 1
        return counts


class Flow:
    def __init__(self, flow):
        self.flow = flow

    def apply_cmd(self, p=10):
        return [self.flow, "apply", "wf.toml", "--auto-approve", "-q", "--color", "never",
                "--parallelism", str(p)]

    def plan_cmd(self, refresh=True, p=16):
        return [self.flow, "plan", "wf.toml", "--detailed-exitcode", "--color", "never",
                f"--refresh={'true' if refresh else 'false'}", "--parallelism", str(p)]

    def destroy_cmd(self, p=10):
        return [self.flow, "destroy", "wf.toml", "--auto-approve", "-q", "--color", "never",
                "--parallelism", str(p)]

    def state(self, d, env):
        proc = subprocess.run([self.flow, "state", "list", "wf.toml", "--color", "never"], cwd=d, env=env,
                              capture_output=True, text=True)
        counts = {}
        for l in proc.stdout.splitlines()[1:]:
            cols = l.split()
            if len(cols) >= 3:
                counts[cols[2]] = counts.get(cols[2], 0) + 1
        return counts


def run(cmd, d, env, ok=(0,), what=""):
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in ok:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        sys.exit(f"peer-terraform: {what or ' '.join(cmd[:2])} failed (exit {proc.returncode}):\n{tail}")
    return wall, proc


def prepare(tool, kind, n, moto, base, tf=None):
    d = tempfile.mkdtemp(prefix=f"peer-{tool}-{kind}-", dir=base)
    with open(os.path.join(d, "t.json"), "w") as f:
        f.write(TEMPLATE)
    if tool == "flow":
        with open(os.path.join(d, "wf.toml"), "w") as f:
            f.write(flow_workflow(kind, n))
        env = moto.env(d)
    else:
        with open(os.path.join(d, "main.tf"), "w") as f:
            f.write(terraform_config(kind, n, moto.endpoint))
        env = tf.env(moto, d)
        tf.init(d, env)
    return d, env


# ---------------------------------------------------------------- the comparison

def measure(tool, runner, kind, n, base, tf=None):
    """Times apply, the plans and destroy of one tool on one workload; the
    requests of each phase."""
    moto = Moto()
    try:
        d, env = prepare(tool, kind, n, moto, base, tf)
        out = {}

        def phase(name, cmd, ok=(0,)):
            before = moto.calls()
            wall, proc = run(cmd, d, env, ok, f"{tool} {name} ({kind})")
            calls = diff(moto.calls(), before)
            out[name] = {"wall": wall, "requests": sum(calls.values()), "ops": calls, "rc": proc.returncode}
            return proc

        phase("apply", runner.apply_cmd(10))
        held = moto.objects()[kind]
        if len(held) != n:
            sys.exit(f"peer-terraform: after {tool} apply moto holds {len(held)} {kind}, not {n}")
        out["state"] = runner.state(d, env)
        phase("plan p16", runner.plan_cmd(True, 16), ok=(0,))
        phase("plan p10", runner.plan_cmd(True, 10), ok=(0,))
        phase("plan no refresh", runner.plan_cmd(False, 16 if tool == "flow" else 10), ok=(0,))
        phase("destroy", runner.destroy_cmd(10))
        left = moto.objects()[kind]
        if left:
            sys.exit(f"peer-terraform: after {tool} destroy moto still holds {len(left)} {kind}")
        return out
    finally:
        moto.stop()


def kill_test(tool, runner, kind, n, fraction, apply_wall, base, tf=None):
    moto = Moto()
    try:
        d, env = prepare(tool, kind, n, moto, base, tf)
        proc = subprocess.Popen(runner.apply_cmd(10), cwd=d, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(fraction * apply_wall)
        killed = proc.poll() is None
        if killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # Let requests already sent land before counting.
        time.sleep(0.5)
        at_moto = len(moto.objects()[kind])
        state = runner.state(d, env)
        wall, second = run(runner.apply_cmd(10), d, env, ok=range(256))
        text = second.stdout + second.stderr
        error = ""
        if second.returncode != 0:
            lines = [l.strip() for l in text.splitlines() if re.search(r"error|exists|×", l, re.I)]
            error = (lines[0] if lines else text.strip().splitlines()[-1])[:160]
            already = len(re.findall(r"already exists|AlreadyExists|ResourceExistsException", text))
        else:
            already = 0
        after_moto = len(moto.objects()[kind])
        after_state = runner.state(d, env)
        return {"killed": killed, "at": fraction * apply_wall, "moto": at_moto, "state": state,
                "second_rc": second.returncode, "second_wall": wall, "error": error,
                "already": already, "after_moto": after_moto, "after_state": after_state}
    finally:
        moto.stop()


def objects_in_state(tool, kind, counts, recorded=False):
    """Objects (not resource instances) state records: a Terraform secret is
    counted by its aws_secretsmanager_secret; flow's steps that are applied,
    or with `recorded`, every step state has a record of (an intent written
    before the create call included: the next apply resolves it)."""
    if tool == "flow":
        return sum(counts.values()) if recorded else counts.get("applied", 0)
    key = {"buckets": "aws_s3_bucket.b", "secrets": "aws_secretsmanager_secret.s",
           "stacks": "aws_cloudformation_stack.k"}[kind]
    return counts.get(key, 0)


def fmt_state(tool, counts):
    if tool == "flow":
        return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "0"
    return ", ".join(f"{v} {k.split('.')[0].replace('aws_secretsmanager_', 'sm_')}"
                     for k, v in sorted(counts.items())) or "0"


def print_table(title, heads, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(heads)]
    line = "  ".join("{:<%d}" % w for w in widths)
    print(title)
    print(line.format(*heads).rstrip())
    print(line.format(*("-" * w for w in widths)).rstrip())
    for r in rows:
        print(line.format(*map(str, r)).rstrip())
    print()


def top_ops(ops, k=6):
    return ", ".join(f"{op} {c}" for op, c in sorted(ops.items(), key=lambda x: -x[1])[:k])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flow", help="path to a flow binary (default: build target/release/flow)")
    ap.add_argument("--terraform", help="path to terraform (default: the one on PATH)")
    ap.add_argument("--tf-mirror", default=os.environ.get("FLOW_TF_MIRROR", DEFAULT_MIRROR))
    ap.add_argument("--objects", type=int, default=200, help="N: buckets, and secrets")
    ap.add_argument("--stacks", type=int, help="M: stacks (default N)")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--fractions", default="0.25,0.5,0.75")
    ap.add_argument("--no-kill", action="store_true", help="skip the kill test")
    ap.add_argument("--json", help="write every measured figure here as JSON")
    a = ap.parse_args()
    tf_bin, tf_version, provider_version = preflight(a)
    flow = os.path.abspath(a.flow) if a.flow else None
    if not flow:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "flow"], cwd=ROOT, check=True)
        flow = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "flow")
    kinds = [k for k in a.only.split(",") if k]
    unknown = [k for k in kinds if k not in WORKLOADS]
    if unknown:
        sys.exit(f"peer-terraform: no workload named {', '.join(unknown)} (there are: {', '.join(WORKLOADS)})")
    sizes = {"buckets": a.objects, "secrets": a.objects, "stacks": a.stacks or a.objects}
    fractions = [float(x) for x in a.fractions.split(",") if x]
    moto_version = subprocess.run([VENV_PY, "-c", "import moto; print(moto.__version__)"],
                                  capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    flow_version = subprocess.run([flow, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; flow: {flow} ({flow_version}, "
          f"commit {commit}); Terraform {tf_version}; AWS provider {provider_version} "
          f"(mirror {a.tf_mirror}); moto {moto_version}\n")

    base = tempfile.mkdtemp(prefix="flow-bench-peer-")
    tf = Terraform(tf_bin, a.tf_mirror, base)
    runners = {"flow": Flow(flow), "terraform": tf}
    judge = Judge("peer-terraform")
    results = {"versions": {"terraform": tf_version, "provider": provider_version, "moto": moto_version,
                            "flow": flow_version, "commit": commit, "cores": os.cpu_count()},
               "compare": {}, "kill": {}}
    try:
        # Preflight the provider itself: a Terraform that cannot start it stops here.
        probe = Moto()
        try:
            d, env = prepare("terraform", "buckets", 1, probe, base, tf)
            proc = subprocess.run(tf.plan_cmd(), cwd=d, env=env, capture_output=True, text=True)
            if proc.returncode not in (0, 2):
                sys.exit("peer-terraform: Terraform could not start the AWS provider "
                         f"{provider_version}:\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-10:]))
        finally:
            probe.stop()

        for kind in kinds:
            n = sizes[kind]
            print(f"== {kind}: {n} ==", flush=True)
            m = {tool: measure(tool, runners[tool], kind, n, base, tf) for tool in ("flow", "terraform")}
            results["compare"][kind] = m
            f, t = m["flow"], m["terraform"]
            rows = []
            for label, fk, tk in [
                ("apply (both -parallelism 10)", "apply", "apply"),
                ("plan, refresh (flow 16 = its default, tf 10 = its default)", "plan p16", "plan p10"),
                ("plan, refresh (both 16)", "plan p16", "plan p16"),
                ("plan, refresh (both 10)", "plan p10", "plan p10"),
                ("plan -refresh=false", "plan no refresh", "plan no refresh"),
                ("destroy (both 10)", "destroy", "destroy"),
            ]:
                fw, tw = f[fk]["wall"], t[tk]["wall"]
                fr, tr = f[fk]["requests"], t[tk]["requests"]
                rows.append([label, f"{fw:.2f}", f"{tw:.2f}", f"{tw / fw:.1f}x" if fw else "-",
                             fr, tr, f"{tr / fr:.1f}x" if fr else "-"])
                judge.note(f"{kind} x{n}: {label}: wall flow / terraform", f"{fw:.2f} s / {tw:.2f} s")
                judge.note(f"{kind} x{n}: {label}: requests flow / terraform", f"{fr} / {tr}")
            print_table(f"{kind}: {n} (one run each; wall in seconds)",
                        ["", "flow s", "terraform s", "tf/flow", "flow req", "tf req", "tf/flow"], rows)
            for tool in ("flow", "terraform"):
                for ph in ("apply", "plan p16", "plan no refresh", "destroy"):
                    print(f"  {tool:9} {ph:15} {top_ops(m[tool][ph]['ops'])}")
            print(flush=True)

        if not a.no_kill:
            rows = []
            for kind in kinds:
                n = sizes[kind]
                for tool in ("flow", "terraform"):
                    wall = results["compare"][kind][tool]["apply"]["wall"]
                    for fr in fractions:
                        k = kill_test(tool, runners[tool], kind, n, fr, wall, base, tf)
                        results["kill"].setdefault(kind, {}).setdefault(tool, {})[str(fr)] = k
                        in_state = objects_in_state(tool, kind, k["state"], recorded=True)
                        after = objects_in_state(tool, kind, k["after_state"])
                        ok = k["second_rc"] == 0 and after == n and k["after_moto"] == n
                        rows.append([kind, tool, f"{fr:g} ({k['at']:.1f} s)" + ("" if k["killed"] else " ended first"),
                                     k["moto"], fmt_state(tool, k["state"]), max(0, k["moto"] - in_state),
                                     "yes" if k["second_rc"] == 0 else f"NO (exit {k['second_rc']})",
                                     k["already"] or "", f"{k['after_moto']}/{after}",
                                     k["error"][:90]])
                        if tool == "flow":
                            judge.check(f"kill at {fr:g} of apply, {kind} x{n}: flow's next apply",
                                        f"exit {k['second_rc']}, {k['after_moto']} at moto, {after} in state",
                                        f"exit 0, {n} at moto, {n} in state", ok)
                        else:
                            judge.note(f"kill at {fr:g} of apply, {kind} x{n}: terraform's next apply",
                                       f"exit {k['second_rc']}, {k['after_moto']} at moto, {after} in state"
                                       + (f", {k['already']} 'already exists'" if k["already"] else ""))
                        print(f"  kill {kind} {tool} at {fr:g}: {rows[-1][3:]}", flush=True)
            print()
            print_table("kill -9 during apply, then apply again (no manual step)",
                        ["workload", "tool", "killed at", "at moto", "in state", "at moto, no record",
                         "2nd apply ok", "already exists", "after: moto/state", "first error"], rows)
        if a.json:
            with open(a.json, "w") as out:
                json.dump(results, out, indent=1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    judge.finish()


if __name__ == "__main__":
    main()
