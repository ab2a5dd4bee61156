#!/usr/bin/env python3
# tests/bench/torch_fedavg.py -- the PyTorch FedAvg loop that `make bench` (bench_workers) times
# fedsim's rounds against (issue 4): cnn2 exactly as torch_train.py defines it, one thread, each
# selected client trains 1 local epoch of plain SGD (batch 32, lr 0.05) from the global model, and
# the server averages the state_dicts weighted by sample counts.
# Usage: torch_fedavg.py DATA_DIR JOBS_FILE. JOBS_FILE has one line per client job of fedsim's own
# run, "ROUND N i1 ... iN": the round and the training-set indices of the client fedsim selected,
# so both sides train the same clients on the same samples. Prints one "round R SECONDS" line per
# round, then "seconds_per_round MEAN" (all rounds, the first included, as fedsim's figure does).
import sys, time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_train import idx_images, idx_labels, model  # noqa: E402 (same cnn2, same loaders)

torch.set_num_threads(1)
torch.manual_seed(1)
BATCH, LR = 32, 0.05


def main():
    data_dir, jobs_file = sys.argv[1], sys.argv[2]
    x = torch.from_numpy(idx_images(data_dir + "/train-images-idx3-ubyte.gz"))
    y = torch.from_numpy(idx_labels(data_dir + "/train-labels-idx1-ubyte.gz"))
    rounds = OrderedDict()
    with open(jobs_file) as f:
        for line in f:
            v = line.split()
            rounds.setdefault(int(v[0]), []).append(torch.tensor([int(i) for i in v[2:]]))
    net = model("cnn2")
    glob = {k: t.clone() for k, t in net.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    times = []
    for r, clients in rounds.items():
        t0 = time.perf_counter()
        acc, total = None, 0
        for idx in clients:
            net.load_state_dict(glob)
            opt = torch.optim.SGD(net.parameters(), lr=LR)  # plain SGD: no momentum
            perm = idx[torch.randperm(len(idx), generator=g)]
            for s in range(0, len(perm), BATCH):  # the last batch may be short
                b = perm[s:s + BATCH]
                opt.zero_grad()
                F.cross_entropy(net(x[b]), y[b]).backward()
                opt.step()
            n = len(idx)
            sd = net.state_dict()
            if acc is None:
                acc = {k: t.detach() * n for k, t in sd.items()}
            else:
                for k, t in sd.items():
                    acc[k] += t.detach() * n
            total += n
        glob = {k: t / total for k, t in acc.items()}
        times.append(time.perf_counter() - t0)
        print("round %d %.4f" % (r, times[-1]), flush=True)
    print("seconds_per_round %.4f" % (sum(times) / len(times)), flush=True)


main()
