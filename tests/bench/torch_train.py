#!/usr/bin/env python3
# tests/bench/torch_train.py -- the PyTorch reference that `make bench` measures fedsim against:
# the same models, batch sizes, optimizer (SGD, momentum 0.9) and Fashion-MNIST data, one thread.
# Usage: torch_train.py DATA_DIR, then one "MODEL BATCH SECONDS" request per stdin line, each
# answered by one "SAMPLES_PER_S" line, so the C bench can interleave its own runs with these and
# both see the same machine conditions.
import gzip, math, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(1)


def idx_images(path):
    with gzip.open(path) as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, h, w).astype(np.float32) / 255


def idx_labels(path):
    with gzip.open(path) as f:
        raw = f.read()
    return np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200),
                             nn.ReLU(), nn.Linear(200, 10))
    if name.startswith("cnn2"):
        w = float(name.split("@")[1]) if "@" in name else 1.0
        c1, c2, f = math.ceil(32 * w), math.ceil(64 * w), math.ceil(512 * w)
        return nn.Sequential(nn.Conv2d(1, c1, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(c2 * 49, f), nn.ReLU(), nn.Linear(f, 10))
    if name == "pa3dfl-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "lenet5-caffe":
        return nn.Sequential(nn.Conv2d(1, 20, 5, bias=False), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(20, 50, 5, bias=False), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(800, 500, bias=False), nn.ReLU(),
                             nn.Linear(500, 10, bias=False))
    raise SystemExit("unknown model " + name)


def main():
    data_dir = sys.argv[1]
    x = torch.from_numpy(idx_images(data_dir + "/train-images-idx3-ubyte.gz"))
    y = torch.from_numpy(idx_labels(data_dir + "/train-labels-idx1-ubyte.gz"))
    print("ready", flush=True)
    for line in sys.stdin:
        name, batch, seconds = line.split()
        batch, seconds = int(batch), float(seconds)
        net = model(name)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

        def step(i):
            s = (i * batch) % (x.shape[0] - batch)
            opt.zero_grad()
            F.cross_entropy(net(x[s:s + batch]), y[s:s + batch]).backward()
            opt.step()

        for i in range(20):  # warm-up: allocator, oneDNN primitive caches
            step(i)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step(steps)
            steps += 1
        print(steps * batch / (time.perf_counter() - t0), flush=True)


if __name__ == "__main__":  # torch_fedavg.py imports model() and the loaders
    main()
