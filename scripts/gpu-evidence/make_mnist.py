"""Write a small MNIST-shaped data set in torchvision's raw idx format.

The runbooks' DDP program (awsome-distributed-training
3.test_cases/pytorch/ddp/ddp.py) loads torchvision's MNIST with
download=True; torchvision skips the download when the four raw files are
already there. The device machine reaches no network, so this writes them:
each image is noise with a bright band at the rows of its label, so the
labels can be learnt and the loss falls. Not MNIST's images: only its format.

    python3 make_mnist.py ROOT TRAIN_COUNT
"""

import os
import struct
import sys

import random


def write_set(raw, prefix, count, rng):
    labels = bytes(rng.randrange(10) for _ in range(count))
    images = bytearray(rng.randrange(64) for _ in range(count * 28 * 28))
    for index, label in enumerate(labels):
        for row in range(2 + 2 * label, 5 + 2 * label):
            start = index * 784 + row * 28
            images[start + 4 : start + 24] = b"\xff" * 20
    with open(os.path.join(raw, f"{prefix}-images-idx3-ubyte"), "wb") as out:
        out.write(struct.pack(">IIII", 2051, count, 28, 28))
        out.write(images)
    with open(os.path.join(raw, f"{prefix}-labels-idx1-ubyte"), "wb") as out:
        out.write(struct.pack(">II", 2049, count))
        out.write(labels)


def main():
    root, count = sys.argv[1], int(sys.argv[2])
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    rng = random.Random(0)
    write_set(raw, "train", count, rng)
    write_set(raw, "t10k", max(count // 6, 10), rng)


if __name__ == "__main__":
    main()
