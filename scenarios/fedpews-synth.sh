#!/bin/sh
# scenarios/fedpews-synth.sh -- FedPeWS's synthetic experiments (spec 002 §6.1-6.3), run by hand:
# every column of Table 2 (FedAvg base) and Table 6 (FedProx base) and the N = 4 run, each as
# base and +PeWS on the same seeds, then `fedsim summary` per column at its target accuracy;
# column fmnist is the Fashion-MNIST extension (fedpews-fmnist.yaml).
#   sh scenarios/fedpews-synth.sh [COLUMN...]     (default: all; seeds 1 2 3; runs/fedpews/)
# About 25 s per run of 200 rounds on one core; all 54 synthetic runs take about 40 minutes.
set -e
cd "$(dirname "$0")/.."
FEDSIM=./build/release/fedsim
SEEDS=${SEEDS:-1 2 3}
out=runs/fedpews
make --no-print-directory

# column: target, overrides (the base file is Table 2 column 1)
column() {
    case $1 in
    t2c1) echo "0.99" ;;
    t2c2) echo "0.90 rounds=250 algorithm.server_lr=0.5 algorithm.pews.lambda=2 algorithm.pews.warmup=0.2" ;;
    t2c3) echo "0.75 rounds=400 algorithm.server_lr=0.25 algorithm.pews.lambda=1 algorithm.pews.warmup=0.1875" ;;
    t2c4) echo "0.99 rounds=500 dataset.name=synth-pews-3.2k algorithm.batch_size=8 algorithm.lr=0.01 algorithm.server_lr=0.1 algorithm.pews.lambda=2 algorithm.pews.warmup=0.1" ;;
    t6c1) echo "0.99 algorithm.pews.lambda=0.1" ;;
    t6c2) echo "0.90 rounds=250 algorithm.server_lr=0.5 algorithm.pews.lambda=0.1 algorithm.pews.warmup=0.2" ;;
    t6c3) echo "0.75 rounds=400 algorithm.server_lr=0.25 algorithm.pews.lambda=1 algorithm.pews.warmup=0.1875" ;;
    t6c4) echo "0.99 rounds=500 dataset.name=synth-pews-3.2k algorithm.batch_size=8 algorithm.lr=0.01 algorithm.server_lr=0.1 algorithm.pews.lambda=1 algorithm.pews.warmup=0.1" ;;
    n4) echo "0.90 partition.groups=[[0],[1],[2],[3]] federation.per_round=4 algorithm.pews.lambda=0" ;;
    fmnist) echo "0.80" ;;
    *) echo "unknown column $1" >&2; exit 2 ;;
    esac
}

cols=${*:-t2c1 t2c2 t2c3 t2c4 t6c1 t6c2 t6c3 t6c4 n4}
for c in $cols; do
    spec=$(column "$c")
    target=${spec%% *}
    sets=""
    for kv in ${spec#"$target"}; do sets="$sets --set $kv"; done
    case $c in t6*) base="fedprox"; extra="--set algorithm.mu=0.01 --set algorithm.pews.base=fedprox" ;;
                *) base="fedavg"; extra="" ;; esac
    file=scenarios/fedpews-synth.yaml
    [ "$c" = fmnist ] && file=scenarios/fedpews-fmnist.yaml
    dirs=""
    for s in $SEEDS; do
        for algo in $base fedpews; do
            d=$out/$c-$algo-$s
            # shellcheck disable=SC2086
            $FEDSIM run "$file" --seed "$s" -q --plots none --workers 0 \
                --set algorithm.name=$algo $sets $extra --out "$d" >/dev/null
            dirs="$dirs $d"
        done
    done
    echo "== $c (target $target)"
    # shellcheck disable=SC2086
    $FEDSIM summary $dirs --target "$target" | sed -n '/^group/,$p'
done
