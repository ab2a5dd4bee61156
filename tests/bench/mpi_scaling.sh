#!/bin/sh
# tests/bench/mpi_scaling.sh -- wall time per round with 1 and 2 MPI worker ranks, and a model that
# predicts larger clusters from per-job compute and frame sizes (run by hand; timings, not a test).
#
# Workload: FedAvg, cnn2 on Fashion-MNIST (scenarios/fmnist-cnn2-fedavg.yaml), 10 clients a round.
# Wall time per round is the difference between a (1 + K)-round and a 1-round run divided by K, so
# start-up (every rank loads and digests the dataset) is left out.
#
# The model. A round's jobs are independent; the coordinator sends job frames one after another,
# each rank trains its jobs in turn, results come back over the link:
#   T(R) = t_coord + sum_j down_j / B + LPT makespan over R ranks of (f_j / F + up_j / B + L)
# f_j: FLOPs job j executed, down_j/up_j: its frame bytes (all three from events.msgpack), F: one
# core's training FLOP/s (from `fedsim train` on the same model and batch), B and L: the link's
# bandwidth and per-message latency (here shared memory: L is dominated by the 1 ms result poll of
# sim/pool.c; on a cluster, use the network's). t_coord, the coordinator's serial part per round
# (building jobs, aggregating, evaluating), is calibrated from the 1-rank run; the 2-rank run
# checks the prediction.
#   usage: sh tests/bench/mpi_scaling.sh [K]   (K extra rounds, default 3; about 3 minutes)
set -e
cd "$(dirname "$0")/../.."
K=${1:-3}
make --no-print-directory mpi >/dev/null
make --no-print-directory >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=${TMPDIR:-/tmp}/fedsim-mpi-scaling
rm -rf "$out"
mkdir -p "$out"
sc="scenarios/fmnist-cnn2-fedavg.yaml --set eval.test_subset=1000"
now() { date +%s.%N; }

# wall seconds of one run of R rounds on NP MPI processes (NP-1 worker ranks)
run() { # np rounds name
    t0=$(now)
    mpirun --oversubscribe -np "$1" build/mpi/fedsim-mpi run $sc --set rounds="$2" \
        --set eval.every="$2" -q --plots none --out "$out/$3" >/dev/null
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

# F: training FLOP/s of one core on cnn2, batch 32
F=$(build/release/fedsim train --model cnn2 --batch 32 --epochs 1 --test-subset 100 2>/dev/null \
    | awk -F'\t' '$1 == 1 {printf "%.6g", $7 * 1e9 / $5}')

echo "# fedsim MPI scaling: cnn2 FedAvg on Fashion-MNIST, 10 jobs a round, $(nproc) cores"
echo "# one core trains at F = $F FLOP/s (fedsim train --model cnn2 --batch 32)"
for np in 2 3; do
    a=$(run $np 1 "np$np-1")
    b=$(run $np $((1 + K)) "np$np-$((1 + K))")
    per=$(echo "$a $b $K" | awk '{printf "%.3f", ($2 - $1) / $3}')
    echo "measured: $((np - 1)) worker rank(s): $per s per round (1 round: $a s, $((1 + K)): $b s)"
    eval "per$np=$per"
done

# per-job FLOPs and frame bytes of the rounds after the first, in dispatch order (largest first
# is what the pool does: sort by FLOPs, which follow samples)
build/release/fedsim events "$out/np3-$((1 + K))" | awk -F'\t' -v skip=0 '
    $2 == "dispatch" && $4 > skip { down[$3 "/" $4] = $5 }
    $2 == "train_done" && $4 > skip { fl[$3 "/" $4] = $6 }
    $2 == "upload_done" && $4 > skip { up[$3 "/" $4] = $5 }
    END { for (k in fl) { split(k, p, "/"); print p[2], fl[k], down[k], up[k] + 0 } }' \
    | sort -k1,1n -k2,2nr >"$out/jobs.tsv"

awk -v F="$F" -v K="$K" -v m1="$per2" -v m2="$per3" '
    function makespan(R, r, i, k, best) { # LPT: each job (largest first) to the least loaded rank
        for (r = 0; r < R; r++) load[r] = 0
        t = 0
        for (i = 1; i <= n[cur]; i++) {
            best = 0
            for (r = 1; r < R; r++) if (load[r] < load[best]) best = r
            load[best] += job[cur, i]
        }
        for (r = 0; r < R; r++) if (load[r] > t) t = load[r]
        return t
    }
    function model(R, B, L, rd, s) { # mean over rounds 2..K+1 of the per-round prediction
        s = 0
        for (rd = 2; rd <= K + 1; rd++) {
            cur = rd
            for (i = 1; i <= n[rd]; i++) job[rd, i] = fl[rd, i] / F + up[rd, i] / B + L
            s += sdown[rd] / B + makespan(R)
        }
        return s / K
    }
    { rd = $1 + 1; i = ++n[rd]; fl[rd, i] = $2; down[rd, i] = $3; up[rd, i] = $4; sdown[rd] += $3 }
    END {
        Bshm = 5e9; Lshm = 1e-3   # one machine: memory copies, the 1 ms result poll
        Bnet = 1.25e9; Lnet = 1.05e-3 # 10 GbE: 50 us MPI latency plus the poll
        tc = m1 - model(1, Bshm, Lshm)
        p2 = tc + model(2, Bshm, Lshm)
        fb = 0; nj = 0
        for (rd = 2; rd <= K + 1; rd++) for (i = 1; i <= n[rd]; i++) {
            fb += down[rd, i] + up[rd, i]; nj++; cf += fl[rd, i] / F }
        printf "jobs: %d per round, %.2f s of compute each on average, frames %.0f KiB each way\n",
            nj / K, cf / nj, fb / nj / 2 / 1024
        printf "calibrated t_coord (coordinator serial part) = %.3f s per round\n", tc
        printf "predicted 2 worker ranks: %.3f s per round; measured %.3f s; error %+.1f%%\n",
            p2, m2, 100 * (p2 - m2) / m2
        printf "speedup 1 -> 2 ranks: measured %.2fx, predicted %.2fx\n", m1 / m2, m1 / p2
        printf "predicted on a 10 GbE cluster, one rank per core (same jobs):\n"
        for (R = 1; R <= 16; R *= 2)
            printf "  %2d worker ranks: %.3f s per round (%.2fx)\n", R,
                tc + model(R, Bnet, Lnet), m1 / (tc + model(R, Bnet, Lnet))
    }' "$out/jobs.tsv"
