#!/bin/sh
# scenarios/width-fmnist-mix.sh -- the width family and Pa3dFL on the device-mix preset (issue 10),
# run by hand: every method on the same clients, devices and seed for ROUNDS rounds, then one
# summary row per run (final accuracy, simulated time and bytes to reach TARGET) and the overlay
# plots of accuracy against simulated time and against bytes, all by the mean personalized
# accuracy (each client's model on its own test split, as Table 1 reports).
#   sh scenarios/width-fmnist-mix.sh [ROUNDS [TARGET]]    (default 20 rounds, target 0.75)
# Runs go to runs/width-fmnist-mix/METHOD, the overlay and summary to runs/width-fmnist-mix/overlay.
# The baselines that cannot adapt their width (FedAvg, Ditto, LG-FedAvg, pFedHN) train the model the
# weakest device holds (pa3dfl-cnn@0.25), as the paper's Hetero setting has them do. About 5
# minutes a method per 20 rounds on 2 cores.
set -e
cd "$(dirname "$0")/.."
FEDSIM=${FEDSIM:-./build/release/fedsim} # FEDSIM=/path/to/fedsim: a fixed binary, no rebuild
rounds=${1:-20}
target=${2:-0.75}
out=runs/width-fmnist-mix
[ "$FEDSIM" != ./build/release/fedsim ] || make --no-print-directory
mkdir -p "$out"
dirs=""
run() { # NAME SETTINGS...
    name=$1
    shift
    echo "== $name"
    $FEDSIM run scenarios/width-fmnist-mix.yaml -q --plots none --set rounds="$rounds" \
        --set eval.every=5 --out "$out/$name" "$@"
    dirs="$dirs $out/$name"
}
run pa3dfl --set algorithm.name=pa3dfl
run fjord --set algorithm.name=fjord
run heterofl --set algorithm.name=heterofl
run fedrolex
# shellcheck disable=SC3043 # (a run named "local", not the keyword)
run local --set algorithm.name=local
run fedavg-weakest --set algorithm.name=fedavg --set model=pa3dfl-cnn@0.25
run ditto-weakest --set algorithm.name=ditto --set model=pa3dfl-cnn@0.25
run lg-fedavg-weakest --set algorithm.name=lg-fedavg --set model=pa3dfl-cnn@0.25
run pfedhn-weakest --set algorithm.name=pfedhn --set model=pa3dfl-cnn@0.25
# shellcheck disable=SC2086
$FEDSIM summary $dirs --target "$target" --acc personalized | tee "$out/summary.txt"
# shellcheck disable=SC2086
$FEDSIM plot $dirs --out "$out/overlay" --target "$target" --acc personalized
