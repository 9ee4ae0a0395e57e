#!/usr/bin/env bash
# Runs flow itself on a machine with a real NVIDIA GPU: workflows/gpu-host-check.toml
# applied as a user applies it on a GPU host (nvidia-smi -q and nccl-tests'
# all_reduce_perf, read and gated by flow), its outputs, a re-plan, the run
# history and the report; then the same workflow told the host has 8 GPUs
# (a real "fewer GPUs than the instance type" fault: the apply must fail
# naming the value and nvidia-smi's line); then destroy.
#
# Inputs: .gpu/flow.xz (a release build of flow, xz-compressed: README.md),
# all_reduce_perf at $2 (collect.sh builds it). Output: $1/flow-*.txt.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
O="${1:?output folder}"
ARP="${2:?all_reduce_perf}"
mkdir -p "$O"
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], \"wb\"))" "$ROOT/.gpu/flow.xz" /tmp/flow && chmod +x /tmp/flow
FLOW=/tmp/flow
W=/tmp/flow-on-gpu; rm -rf "$W"; mkdir -p "$W"
cp "$ROOT/workflows/gpu-host-check.toml" "$W/"
cd "$W"
step() { local name=$1; shift; echo "== $name: flow $*" | tee -a "$O/flow-summary.txt"; ( NO_COLOR=1 "$FLOW" "$@" ) >"$O/flow-$name.txt" 2>&1; echo "rc=$?" >>"$O/flow-$name.txt"; tail -3 "$O/flow-$name.txt" | tee -a "$O/flow-summary.txt"; }
VARS=(--var gpus=1 --var "all_reduce_perf=$ARP")
"$FLOW" --version >"$O/flow-version.txt" 2>&1
step validate validate gpu-host-check.toml
step plan plan gpu-host-check.toml "${VARS[@]}"
step apply apply gpu-host-check.toml "${VARS[@]}" --auto-approve
for o in gpu.gpus gpu.max_temperature_c gpu.ecc_uncorrected_volatile gpu.driver_version nccl.busbw nccl.busbw_peak nccl.out_of_bounds; do
  echo "$o = $("$FLOW" output gpu-host-check.toml "$o" 2>&1)" >>"$O/flow-outputs.txt"
done
step replan plan gpu-host-check.toml "${VARS[@]}"
step runs runs gpu-host-check.toml
"$FLOW" report gpu-host-check.toml >"$O/flow-report.html" 2>"$O/flow-report-stderr.txt"; echo "report rc=$?" >>"$O/flow-summary.txt"
step logs-gpu logs gpu-host-check.toml gpu
step eight-gpus apply gpu-host-check.toml --var gpus=8 --var "all_reduce_perf=$ARP" --auto-approve --state-dir "$W/eight"
step destroy destroy gpu-host-check.toml "${VARS[@]}" --auto-approve
cd "$ROOT"
