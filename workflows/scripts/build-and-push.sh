#!/usr/bin/env bash
# Builds a container image and pushes it to an ECR repository, as one
# command for an `exec` step: the HyperPod runbook's steps 1.2 and 1.3
# ("Build a Docker Image", "Push the Image to Amazon ECR";
# workflows/hyperpod-cpu-ddp.toml) and the EKS runbook's build.sh
# (workflows/eks-p4d.toml). The repository itself is made by the workflow's
# ecr.repository step, which passes its URI in.
#
# Environment (set by the step):
#   REPO_URI        ACCOUNT.dkr.ecr.REGION.amazonaws.com/NAME
#   TAG             the image tag, e.g. pytorch2.2-cpu
#   CONTEXT         the build context folder, relative to the workflow folder
#   CONTAINER_TOOL  docker (default), podman, finch, or any command with
#                   their `login`, `build` and `push` subcommands
#   PLATFORM        target platform, e.g. linux/amd64 (empty: the tool's default)
#   BUILD_NETWORK   e.g. sagemaker in SageMaker Studio (the runbook's
#                   $DOCKER_NETWORK); empty: the tool's default network
#   BASE_IMAGE      optional: passed as --build-arg BASE_IMAGE=...; when it
#                   is in an ECR registry (an AWS Deep Learning Container,
#                   say), the script logs in to that registry too
#   FLOW_OUTPUT     set by flow: gets image_uri=REPO_URI:TAG, and
#                   image_by_digest=REPO_URI@sha256:... when the push
#                   reports the digest (the image pinned to what was pushed)
#
# The registry password comes from `aws ecr get-login-password` (or boto3
# when the aws CLI is not installed) and goes to the tool's
# `login --password-stdin` through a pipe: it is never printed or written to
# a file by this script.
set -euo pipefail

: "${REPO_URI:?REPO_URI (the ECR repository URI) is required}"
: "${TAG:?TAG is required}"
CONTEXT=${CONTEXT:-.}
CONTAINER_TOOL=${CONTAINER_TOOL:-docker}
PLATFORM=${PLATFORM:-}
BUILD_NETWORK=${BUILD_NETWORK:-}
BASE_IMAGE=${BASE_IMAGE:-}

# ACCOUNT.dkr.ecr.REGION.amazonaws.com[.cn] -> REGION (empty if not ECR)
ecr_region() {
  printf '%s\n' "$1" | sed -n 's/^[0-9]*\.dkr\.ecr\.\([a-z0-9-]*\)\.amazonaws\.com.*$/\1/p'
}
registry=${REPO_URI%%/*}
region=$(ecr_region "$registry")
region=${region:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}
image="$REPO_URI:$TAG"

if ! command -v "${CONTAINER_TOOL%% *}" >/dev/null 2>&1; then
  echo "container tool \`$CONTAINER_TOOL\` not found: install docker, podman or finch, or set the workflow's container_tool variable" >&2
  exit 1
fi
if [ ! -d "$CONTEXT" ]; then
  echo "build context \`$CONTEXT\` is not a folder" >&2
  exit 1
fi

# The password for the ECR registry of region $1.
ecr_password() {
  if command -v aws >/dev/null 2>&1; then
    aws ecr get-login-password ${1:+--region "$1"}
  else
    python3 - "$1" <<'PY'
import base64, sys
import boto3
region = sys.argv[1] or None
token = boto3.client("ecr", region_name=region).get_authorization_token()
data = token["authorizationData"][0]["authorizationToken"]
print(base64.b64decode(data).decode().split(":", 1)[1])
PY
  fi
}

echo "Logging in to $registry with $CONTAINER_TOOL ..."
ecr_password "$region" | $CONTAINER_TOOL login --username AWS --password-stdin "$registry"

base_registry=${BASE_IMAGE%%/*}
base_region=$(ecr_region "$base_registry")
if [ -n "$BASE_IMAGE" ] && [ -n "$base_region" ] && [ "$base_registry" != "$registry" ]; then
  echo "Logging in to $base_registry (base image) ..."
  ecr_password "$base_region" | $CONTAINER_TOOL login --username AWS --password-stdin "$base_registry"
fi

build_args=(build -t "$image")
[ -n "$BASE_IMAGE" ] && build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -n "$PLATFORM" ] && build_args+=(--platform "$PLATFORM")
[ -n "$BUILD_NETWORK" ] && build_args+=("--network=$BUILD_NETWORK")
build_args+=("$CONTEXT")

echo "Building $image from $CONTEXT ..."
$CONTAINER_TOOL "${build_args[@]}"

echo "Pushing $image ..."
push_log=$(mktemp)
trap 'rm -f "$push_log"' EXIT
$CONTAINER_TOOL push "$image" 2>&1 | tee "$push_log"

echo "image_uri=$image" >> "${FLOW_OUTPUT:-/dev/null}"
digest=$(grep -o 'sha256:[0-9a-f]\{64\}' "$push_log" | tail -n 1 || true)
if [ -n "$digest" ]; then
  echo "image_by_digest=$REPO_URI@$digest" >> "${FLOW_OUTPUT:-/dev/null}"
fi
echo "Pushed $image${digest:+ ($digest)}"
