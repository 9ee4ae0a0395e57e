#!/usr/bin/env bash
# Runs, on a machine with a real NVIDIA GPU, the per-node checks and the
# training that fleet health reads, and keeps what they printed:
#   - nvidia-smi (the default table, -q, the CSV query the health check uses,
#     topo -m, nvlink -s), versions of the driver, CUDA, PyTorch and NCCL;
#   - awsome-distributed-training's gpu-cluster-healthcheck, unmodified,
#     lightweight suite: once as a host of no known instance type and once
#     as a p5.48xlarge (8 GPUs expected on a host with fewer: a real
#     "GPU count mismatch"), told through the `ec2-metadata` fallback the
#     suite itself reads, inside a network namespace with no route (so its
#     IMDS probe sends nothing);
#   - nccl-tests all_reduce_perf built from source with nvcc against the
#     NCCL that PyTorch ships, with and without NCCL_DEBUG=INFO;
#   - the runbooks' DDP program (3.test_cases/pytorch/ddp/ddp.py,
#     unmodified) under torchrun on one GPU: a run whose worker is killed
#     with SIGKILL after its fourth snapshot (torchrun's failure report), then
#     the same command again, resuming from the snapshot.
# Inputs, carried in the ignored folder .gpu/ (scripts/gpu-evidence/README.md
# says how to lay it): .gpu/nccl-tests, .gpu/upstream. Output: $OUT/gpu.tar.gz
# and $OUT/summary.txt.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
GPU="$ROOT/.gpu"
W=/tmp/gpu-evidence
rm -rf "$W"; mkdir -p "$W/out"
O="$W/out"
say() { echo "== $*" | tee -a "$O/summary.txt"; }
run() { local name=$1; shift; say "$name: $*"; ( "$@" ) >"$O/$name.txt" 2>&1; echo "rc=$?" >>"$O/$name.txt"; tail -3 "$O/$name.txt" | tee -a "$O/summary.txt"; }

say "date $(date -u +%FT%TZ)"
run uname uname -a
run nvidia-smi nvidia-smi
run nvidia-smi-q nvidia-smi -q
run nvidia-smi-query nvidia-smi --query-gpu=index,name,pci.bus_id,serial,uuid,memory.total,temperature.gpu,power.draw,clocks.sm,ecc.errors.uncorrected.volatile.total,persistence_mode --format=csv
run nvidia-smi-topo nvidia-smi topo -m
run nvidia-smi-nvlink nvidia-smi nvlink -s
run nvcc nvcc --version
run dcgmi bash -c 'command -v dcgmi && dcgmi --version && timeout 120 dcgmi diag -r 1'
run efa bash -c 'ls -la /dev/infiniband 2>&1; command -v lspci && lspci | grep -i -e efa -e nvidia; command -v fi_info && fi_info -p efa'
run torch python3 -c 'import torch, torch.cuda.nccl as n; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", n.version(), "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0))'

# --- the published health check, twice ---
HC="$GPU/upstream/4.validation_and_observability/2.gpu-cluster-healthcheck"
chmod +x "$HC"/*.sh "$HC"/checks/*.sh "$HC"/lib/*.py 2>/dev/null
for as in unknown p5.48xlarge; do
  mkdir -p "$W/bin-$as"
  printf '#!/bin/sh\necho "instance-type: %s"\n' "$as" >"$W/bin-$as/ec2-metadata"
  chmod +x "$W/bin-$as/ec2-metadata"
  run "healthcheck-$as" unshare -n env PATH="$W/bin-$as:$PATH" timeout 150 \
    "$HC/gpu-healthcheck.sh" --suite lightweight --results-dir "$O/healthcheck-$as" --timeout 120
done

# --- nccl-tests against PyTorch's NCCL ---
NCCL_PKG="$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)"
say "NCCL package: $NCCL_PKG"
mkdir -p "$W/nccl/lib"
ln -sfn "$NCCL_PKG/include" "$W/nccl/include"
for f in "$NCCL_PKG"/lib/libnccl.so*; do ln -sf "$f" "$W/nccl/lib/"; done
[ -e "$W/nccl/lib/libnccl.so" ] || ln -sf "$(ls "$NCCL_PKG"/lib/libnccl.so.* | head -1)" "$W/nccl/lib/libnccl.so"
CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}"
cp -r "$GPU/nccl-tests" "$W/nccl-tests"
run nccl-build make -C "$W/nccl-tests/src" -j16 MPI=0 CUDA_HOME="$CUDA_HOME" NCCL_HOME="$W/nccl" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ../build/all_reduce_perf
export LD_LIBRARY_PATH="$W/nccl/lib:${LD_LIBRARY_PATH:-}"
run nccl-allreduce timeout 120 "$W/nccl-tests/build/all_reduce_perf" -b 8 -e 1G -f 2 -g 1
run nccl-allreduce-info env NCCL_DEBUG=INFO timeout 120 "$W/nccl-tests/build/all_reduce_perf" -b 8 -e 128M -f 2 -g 1

# --- the DDP program: killed, then resumed ---
mkdir -p "$W/ddp/mlflow/pytorch" "$W/ddp/ck"
cp "$GPU/upstream/3.test_cases/pytorch/ddp/ddp.py" "$W/ddp/"
# mlflow is not installed there: an empty module stands in for the import
# (the program runs without --use_mlflow, so it calls nothing of it).
: >"$W/ddp/mlflow/__init__.py"; : >"$W/ddp/mlflow/pytorch/__init__.py"
python3 "$HERE/make_mnist.py" "$W/ddp/data" 12000
cd "$W/ddp"
ARGS=(--standalone --nproc_per_node=1 ddp.py --total_epochs 12 --save_every 1 --batch_size 64 --checkpoint_path "$W/ddp/ck/snapshot.pt")
say "ddp first attempt"
setsid torchrun "${ARGS[@]}" >"$O/ddp-attempt1.txt" 2>&1 &
for _ in $(seq 1 600); do grep -q "Epoch 3 | Training snapshot saved" "$O/ddp-attempt1.txt" && break; sleep 0.2; done
WORKER="$(pgrep -f 'ddp.py --total_epochs' | while read -r p; do [ "$(cat /proc/$p/comm)" != torchrun ] && grep -q LOCAL_RANK "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -1)"
say "killing worker pid $WORKER with SIGKILL"
kill -9 "$WORKER"
wait; echo "rc=$?" >>"$O/ddp-attempt1.txt"
tail -5 "$O/ddp-attempt1.txt" | tee -a "$O/summary.txt"
run ddp-attempt2 timeout 240 torchrun "${ARGS[@]}"
cd "$W"
tar -czf "$OUT/gpu.tar.gz" -C "$W" out
cp "$O/summary.txt" "$OUT/summary.txt"
