#!/usr/bin/env bash
# Records what llama-recipes' FSDP fine-tuning prints, run as
# workflows/manifests/fsdp.yaml runs it (torchrun recipes/finetuning/finetuning.py
# --enable_fsdp ..., the branch aws-do-fsdp the EKS runbook's image clones),
# on one GPU and offline: a Llama of random weights and an Alpaca-format file
# made by make_tiny_llama.py stand in for Llama 2 7B and samsum (both
# downloads), so the arguments add `--dataset alpaca_dataset` and name a
# local model. The program itself is unchanged.
#
# Twice, each with its own packages (carried as wheels in .whl/, see
# README.md): `2024`, the versions of the branch's date (transformers
# 4.46.3, peft 0.13.2, accelerate 1.1.1, datasets 3.1.0, huggingface_hub
# 0.26.5, tokenizers 0.20.3, setuptools 75.6.0); `now`, what a build of the
# image installs today on top of the machine's packages (datasets 5.2.0,
# fire 0.7.1; setuptools 81.0.0, as 82 removed the pkg_resources
# finetuning.py imports). PyTorch and the rest are the machine's own.
# LLAMA_SETS chooses (default both).
#
# Inputs: .gpu/llama-recipes (git archive of the branch: README.md),
# .whl/now, .whl/2024. Output: $1/llama-<set>.txt (+ versions).
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
O="${1:?output folder}"
mkdir -p "$O"
for set in ${LLAMA_SETS:-2024 now}; do
  case $set in 2024) limit=200 ;; *) limit=120 ;; esac
  W="/tmp/llama-$set"; rm -rf "$W"; mkdir -p "$W"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$W/site" "$ROOT"/.whl/$set/*.whl >"$O/llama-$set-install.txt" 2>&1
  cp -r "$ROOT/.gpu/llama-recipes" "$W/llama-recipes"
  export PYTHONPATH="$W/site:$W/llama-recipes/src"
  python3 -c 'import torch, transformers, peft, accelerate, datasets, setuptools, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "peft", peft.__version__, "accelerate", accelerate.__version__, "datasets", datasets.__version__,
      "setuptools", setuptools.__version__)' >"$O/llama-$set-versions.txt" 2>&1
  python3 "$HERE/make_tiny_llama.py" "$W/model" \
    "$W/llama-recipes/src/llama_recipes/datasets/alpaca_data.json" >>"$O/llama-$set-versions.txt" 2>&1
  cd "$W/llama-recipes"
  # The manifest's environment, less the EFA provider's (no EFA here).
  env LOGLEVEL=INFO NCCL_DEBUG=INFO NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
    HF_HOME="$W/hf" HF_HUB_OFFLINE=1 \
    timeout "$limit" torchrun --nproc_per_node=1 --nnodes=1 recipes/finetuning/finetuning.py \
    --num_epochs=3 --batch_size_training=3 --enable_fsdp \
    --model_name "$W/model" --dataset alpaca_dataset \
    --output_dir "$W/out" --dist_checkpoint_root_folder "$W/checkpoints" \
    >"$O/llama-$set.txt" 2>&1
  echo "rc=$?" >>"$O/llama-$set.txt"
  tail -4 "$O/llama-$set.txt"
  cd "$ROOT"
done
