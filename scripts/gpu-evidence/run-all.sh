#!/usr/bin/env bash
# The whole device check in one call: collect.sh (the programs' output),
# flow-on-gpu.sh (flow applying workflows/gpu-host-check.toml on the GPU),
# llama-recipes.sh (the EKS runbook's fine-tuning). Everything lands in
# $OUT/gpu.tar.gz (out/...) and $OUT/summary.txt.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
FINAL="${OUT:?OUT is the folder the device gives back}"
export OUT=/tmp/collect-out; rm -rf "$OUT"; mkdir -p "$OUT"
SECONDS=0
"$HERE/collect.sh"; echo "== collect.sh done at ${SECONDS}s" | tee -a /tmp/gpu-evidence/out/summary.txt
"$HERE/flow-on-gpu.sh" /tmp/gpu-evidence/out /tmp/gpu-evidence/nccl-tests/build/all_reduce_perf
echo "== flow-on-gpu.sh done at ${SECONDS}s" | tee -a /tmp/gpu-evidence/out/summary.txt
"$HERE/llama-recipes.sh" /tmp/gpu-evidence/out
echo "== llama-recipes.sh done at ${SECONDS}s" | tee -a /tmp/gpu-evidence/out/summary.txt
tar -czf "$FINAL/gpu.tar.gz" -C /tmp/gpu-evidence out
cp /tmp/gpu-evidence/out/summary.txt "$FINAL/summary.txt"
