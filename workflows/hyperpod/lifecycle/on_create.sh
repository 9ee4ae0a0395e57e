#!/bin/bash
# Lifecycle script that SageMaker HyperPod runs on each instance it creates
# (the instance group's `on_create`), for an EKS-orchestrated cluster. As the
# awsome-distributed-training HyperPod EKS base config does: log to the
# cluster's log group and leave the node to the EKS bootstrap. Put more
# set-up (a containerd data root on the NVMe disks, for example) here.
set -euxo pipefail
echo "flow hyperpod-cpu-ddp: on_create ran on $(hostname) at $(date -u +%FT%TZ)"
