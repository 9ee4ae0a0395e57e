"""Multi-node PyTorch DDP training on CPUs, with a snapshot to resume from.

Written after the ddp.py of awsome-distributed-training's
3.test_cases/pytorch/cpu-ddp (itself after PyTorch's ddp-tutorial-series
multinode.py): a linear model on a random dataset, trained with the gloo
backend under torchrun, saving a snapshot every SAVE_EVERY epochs to
--checkpoint_path (on FSx, /fsx/snapshot.pt) and resuming from it when a
worker restarts.

    torchrun --nproc_per_node=4 --nnodes=2 ddp.py TOTAL_EPOCHS SAVE_EVERY \
        --batch_size=32 --checkpoint_path=/fsx/snapshot.pt

Each rank prints one line per epoch, numbered from 1 (upstream: from 0), so
the last line of a run is "[RANK 0] Epoch TOTAL_EPOCHS | Batchsize: 32 |
Steps: 8":

    [RANK 0] Epoch 5000 | Batchsize: 32 | Steps: 8
    Epoch 5000 | Training snapshot saved at /fsx/snapshot.pt
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomDataset(Dataset):
    """`size` random (20 features → 1 target) pairs, the same on every rank."""

    def __init__(self, size):
        generator = torch.Generator().manual_seed(0)
        self.data = [
            (torch.rand(20, generator=generator), torch.rand(1, generator=generator))
            for _ in range(size)
        ]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path):
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.model = model
        self.data = data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            print(f"[RANK {self.rank}] Loading snapshot {snapshot_path}", flush=True)
            self._load_snapshot()
        self.model = DDP(self.model)

    def _load_snapshot(self):
        snapshot = torch.load(self.snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"[RANK {self.rank}] Resuming training after epoch {self.epochs_run}", flush=True)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        tmp = self.snapshot_path + ".tmp"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)

    def _run_epoch(self, epoch):
        batch_size = len(next(iter(self.data))[0])
        print(
            f"[RANK {self.rank}] Epoch {epoch} | Batchsize: {batch_size} | Steps: {len(self.data)}",
            flush=True,
        )
        self.data.sampler.set_epoch(epoch)
        for source, targets in self.data:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(source), targets)
            loss.backward()
            self.optimizer.step()

    def train(self, total_epochs):
        for epoch in range(self.epochs_run + 1, total_epochs + 1):
            self._run_epoch(epoch)
            if self.rank == 0 and (epoch % self.save_every == 0 or epoch == total_epochs):
                self._save_snapshot(epoch)


def main():
    parser = argparse.ArgumentParser(description="Distributed training on CPUs")
    parser.add_argument("total_epochs", type=int, help="How many epochs to train")
    parser.add_argument("save_every", type=int, help="Save a snapshot every N epochs")
    parser.add_argument("--batch_size", default=32, type=int, help="Batch size per rank")
    parser.add_argument("--checkpoint_path", default="./snapshot.pt", help="Snapshot file")
    args = parser.parse_args()

    init_process_group(backend="gloo")
    dataset = RandomDataset(2048)
    data = DataLoader(
        dataset,
        batch_size=args.batch_size,
        pin_memory=False,
        shuffle=False,
        sampler=DistributedSampler(dataset),
    )
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    trainer = Trainer(model, data, optimizer, args.save_every, args.checkpoint_path)
    trainer.train(args.total_epochs)
    if trainer.rank == 0:
        print(f"[RANK 0] Training finished after {args.total_epochs} epochs", flush=True)
    destroy_process_group()


if __name__ == "__main__":
    main()
