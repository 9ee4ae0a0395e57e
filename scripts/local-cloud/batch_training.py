"""A training that checkpoints to S3, as the main node of a Batch
multi-node parallel job runs it, for batch_compute.py (beside this file).

The stand-in for a distributed training (torchrun and the like) that a
`batch.job` with `restarts` and `checkpoint_s3` runs. Its command names
`train EPOCHS`; flow tells every node's container FLOW_CHECKPOINT_DIR
(the s3:// prefix), FLOW_ATTEMPT and, on a restart, FLOW_RESUME_FROM (the
newest checkpoint it listed there). The model, as a training script is
written for it:

- it resumes after the epoch FLOW_RESUME_FROM names (`…/epoch-K.pt`:
  from epoch K+1), printing "resumed from URI at epoch K+1", else starts
  at epoch 1;
- after each epoch it puts `PREFIX/epoch-K.pt` under FLOW_CHECKPOINT_DIR
  (PutObject, as torch.save to S3 through a client does) and prints its
  loss as the PyTorch DDP tutorial's torchrun script does (`[RANK 0]
  Epoch K | Batchsize: 32 | Steps: 100 | Loss: L`, what flow's
  `parse = "torchrun"` reads);
- when a node of its job died (batch_compute.py tells it which: the
  fault table's `#N dies`, cloud_batch_mnp.py), it got through half of
  the epochs it had left (rounded up) before the peer was lost, then
  prints NCCL's warning naming the lost peer's address and stops: the
  main node's container exits non-zero and the job FAILED;
- when a node of its job hangs (`#N hangs`), it gets as far, then prints
  NCCL's warning naming that node's address and nothing more: the job
  stays RUNNING (cloud_batch_mnp.py) until it is terminated; when it
  stalls (`#N stalls`), the same, but the warning comes again about
  every second (batch_compute.py appends it: `stalled_line`) while no
  loss does;
- otherwise it runs to EPOCHS and prints "training done at epoch EPOCHS".

Checkpoints are put before the log is written (batch_compute.py writes a
node's stream after this returns): a reader that has the failed job's log
finds its checkpoints listed. Nothing here is a measurement.
"""

import re


def epochs_of(command):
    """EPOCHS from `train EPOCHS` in the command's words, or None."""
    words = " ".join(command).split()
    for i, w in enumerate(words):
        if w == "train" and i + 1 < len(words) and words[i + 1].isdigit():
            return int(words[i + 1])
    return None


def split_uri(uri):
    """(bucket, prefix ending in / or empty) of an s3:// URI."""
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def run(command, env, lost_peer, s3, hung_peer=None):
    """What the main node prints, with its checkpoints put through `s3`
    (a boto3 client). `lost_peer`: the address of a node that died, or
    None; `hung_peer`: the address of one that hangs, or None."""
    epochs = epochs_of(command) or 1
    out = [f"training: {epochs} epochs, attempt {env.get('FLOW_ATTEMPT', '1')}"]
    start = 1
    resume = env.get("FLOW_RESUME_FROM", "")
    m = re.search(r"epoch-([0-9]+)", resume)
    if m:
        start = int(m.group(1)) + 1
        out.append(f"resumed from {resume} at epoch {start}")
    last = epochs
    if lost_peer is not None or hung_peer is not None:
        last = min(epochs, start - 1 + max(1, (epochs - start + 2) // 2))
    where = env.get("FLOW_CHECKPOINT_DIR", "")
    bucket, prefix = split_uri(where) if where.startswith("s3://") else (None, None)
    for epoch in range(start, last + 1):
        out.append(f"[RANK 0] Epoch {epoch} | Batchsize: 32 | Steps: 100 | Loss: {2.0 / epoch:.4f}")
        if bucket:
            s3.put_object(Bucket=bucket, Key=f"{prefix}epoch-{epoch}.pt", Body=f"epoch {epoch}\n".encode())
            out.append(f"saved checkpoint s3://{bucket}/{prefix}epoch-{epoch}.pt")
    if hung_peer is not None:
        out.append(stalled_line(hung_peer))
    elif lost_peer is not None:
        out.append(f"NCCL WARN NET/Socket : Connection closed by remote peer {lost_peer}<43512>")
        out.append(f"training stopped at epoch {last}: a peer is gone")
    else:
        out.append(f"training done at epoch {epochs}")
    return "\n".join(out) + "\n"


def stalled_line(peer):
    """NCCL's warning of a collective waiting on `peer`."""
    return f"NCCL WARN Timeout waiting for peer {peer}<43512> in all_reduce"
