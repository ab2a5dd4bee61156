#!/usr/bin/env python3
# tests/reference/fedpews_torch.py -- an independent PyTorch implementation of FedPeWS on its
# synthetic data (spec 002), run by hand to tell fedsim's bugs from the algorithm's behaviour:
# the Synthetic-32K generator, the 5-32-64-128-32-4 MLP with PyTorch's default init, FedAvg
# (1 local epoch of plain SGD, uniform averaging, server lr) and the learned warmup (per-client
# neuron scores, Bernoulli gates on the hidden units; per batch a score step on the gates'
# gradient minus the diversity term, then a weight step under a fresh draw; the upload under a
# third draw with the AND rule; per-parameter averaging over the clients that hold it). Nothing
# is shared with fedsim but the spec, so agreement means both follow it.
# Usage (Debian's python3 with python3-torch):
#   python3 tests/reference/fedpews_torch.py fedavg|pews SEED [N=4|2] [lam=0] [W=25] [T=200]
#       [lr=0.001] [mlr=0.1] [B=32] [eta_g=1] [sinit=0]
# N = 4 puts class c on client c; N = 2 splits {0,1} | {2,3} as fedsim's preset does. Prints the
# global model's test accuracy every 25 rounds and the first round at or above 99%.
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
SIZES = [5, 32, 64, 128, 32, 4]
CENTRES = [(-4, 4), (4, 4), (-4, -4), (4, -4)]
MAPS = [[[0.05, 0], [0, 0.45]], [[0.25, 0.15], [0.15, 0.25]], [[0.25, 0.15], [0.15, 0.25]],
        [[0.25, 0], [0, 0.05]]]


def generate(n, rng):
    """16 clusters of n points, lifted to [x, y, x², y², xy] and standardised (unbiased std)."""
    pts, labels = [], []
    for p in range(4):
        for j in range(4):
            z = rng.standard_normal((n, 2))
            pts.append(z @ np.array(MAPS[p]) + np.array(CENTRES[p]) + np.array([j, -j]))
            labels += [(p >= 2) * 2 + j % 2] * n
    x, y = np.concatenate(pts).T
    f = np.stack([x, y, x * x, y * y, x * y], 1)
    f = (f - f.mean(0)) / f.std(0, ddof=1)
    return torch.tensor(f, dtype=torch.float32), torch.tensor(labels)


def init_model(gen):
    params = []
    for i in range(5):
        bound = 1 / math.sqrt(SIZES[i])
        params.append((torch.rand(SIZES[i + 1], SIZES[i], generator=gen) * 2 - 1) * bound)
        params.append((torch.rand(SIZES[i + 1], generator=gen) * 2 - 1) * bound)
    return params


def forward(params, x, gates=None):
    h = x
    for i in range(5):
        h = h @ params[2 * i].T + params[2 * i + 1]
        if i < 4:
            h = torch.relu(h)
            if gates is not None:
                h = h * gates[i]
    return h


def draw(scores, gen):
    return [torch.bernoulli(torch.sigmoid(s), generator=gen) for s in scores]


def run(algo, seed, N=4, lam=0.0, W=25, T=200, lr=1e-3, mlr=0.1, B=32, eta_g=1.0, sinit=0.0):
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    xtr, ytr = generate(2000, rng)
    xte, yte = generate(400, rng)
    if N == 4:
        parts = [torch.nonzero(ytr == c).flatten() for c in range(4)]
    else:
        parts = [torch.nonzero(ytr < 2).flatten(), torch.nonzero(ytr >= 2).flatten()]
    xg = init_model(gen)
    scores = [[torch.full((h,), sinit) for h in SIZES[1:5]] for _ in range(N)]
    theta = [[torch.sigmoid(s) for s in sc] for sc in scores]  # the server's table Θ
    reached = None
    for t in range(T):
        warm = algo == "pews" and t < W
        sums = [torch.zeros_like(p) for p in xg]
        counts = [torch.zeros_like(p) for p in xg]
        new_theta = list(theta)
        for c in range(N):
            w = [p.clone() for p in xg]
            order = parts[c][torch.randperm(len(parts[c]), generator=gen)]
            for k in range(0, len(order), B):
                xb, yb = xtr[order[k:k + B]], ytr[order[k:k + B]]
                gates = None
                if warm:  # Procedure I: the scores step on the gates' straight-through gradient
                    g = [m.requires_grad_() for m in draw(scores[c], gen)]
                    dg = torch.autograd.grad(F.cross_entropy(forward(w, xb, g), yb), g)
                    for layer, (s, d) in enumerate(zip(scores[c], dg)):
                        sig = torch.sigmoid(s)
                        others = sum(theta[o][layer] for o in range(N) if o != c) / (N - 1)
                        s -= mlr * (d - 2 * lam * (sig - others)) * sig * (1 - sig)
                    gates = draw(scores[c], gen)  # Procedure II under a fresh draw
                wr = [p.requires_grad_() for p in w]
                dw = torch.autograd.grad(F.cross_entropy(forward(wr, xb, gates), yb), wr)
                w = [(p - lr * d).detach() for p, d in zip(wr, dw)]
            if warm:  # upload under a third draw: a weight is held iff both its units are
                new_theta[c] = [torch.sigmoid(s) for s in scores[c]]
                units = [torch.ones(5)] + draw(scores[c], gen) + [torch.ones(4)]
                held = []
                for i in range(5):
                    held += [torch.outer(units[i + 1], units[i]), units[i + 1]]
            else:
                held = [torch.ones_like(p) for p in w]
            for j in range(10):
                sums[j] += held[j] * w[j]
                counts[j] += held[j]
        theta = new_theta
        for j in range(10):  # per-parameter average; a parameter nobody holds stays
            avg = torch.where(counts[j] > 0, sums[j] / counts[j].clamp(min=1), xg[j])
            xg[j] = xg[j] - eta_g * (xg[j] - avg)
        acc = (forward(xg, xte).argmax(1) == yte).float().mean().item()
        if reached is None and acc >= 0.99:
            reached = t + 1
        if (t + 1) % 25 == 0 or t + 1 == T:
            print(f"{algo} seed {seed} round {t + 1} accuracy {acc:.4f}", flush=True)
    print(f"{algo} seed {seed} first round at 99%: {reached or 'not reached'}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("fedavg", "pews"):
        sys.exit("usage: fedpews_torch.py fedavg|pews SEED [N=4] [lam=0] [W=25] [T=200] ...")
    kw = dict(a.split("=", 1) for a in sys.argv[3:])
    ints = {"N", "W", "T", "B"}
    kw = {k: int(v) if k in ints else float(v) for k, v in kw.items()}
    run(sys.argv[1], int(sys.argv[2]), **kw)
