#!/bin/sh
# scenarios/compression.sh -- accuracy against bytes under update compression (issue 42), run by
# hand: scenarios/compression.yaml (FedAvg, Fashion-MNIST, 100 clients) with uploads sent dense,
# as fp16, qsgd with s = 255 (9 bits a value: 8 bits of magnitude and a sign) and s = 15 (5 bits),
# and topk 10% and 1% with error feedback; downloads stay dense float32. Then one summary row per
# run (final accuracy, bytes to reach TARGET) and the overlay of accuracy against bytes.
#   sh scenarios/compression.sh [ROUNDS [TARGET]]    (default 100 rounds, target 0.8)
# Runs go to runs/compression/SCHEME, the overlay and summary to runs/compression/overlay.
# FEDSIM=/path/to/fedsim uses that binary instead of building the release one.
set -e
cd "$(dirname "$0")/.."
FEDSIM=${FEDSIM:-./build/release/fedsim}
rounds=${1:-100}
target=${2:-0.8}
out=runs/compression
[ "$FEDSIM" != ./build/release/fedsim ] || make --no-print-directory
mkdir -p "$out"
dirs=""
run() { # NAME UP-SECTION
    echo "== $1"
    nice $FEDSIM run scenarios/compression.yaml -q --plots none --set rounds="$rounds" \
        --set "compression.up=$2" --out "$out/$1"
    dirs="$dirs $out/$1"
}
run none '{scheme: none}'
run fp16 '{scheme: fp16}'
run qsgd-8bit '{scheme: qsgd, levels: 255}'
run qsgd-4bit '{scheme: qsgd, levels: 15}'
run topk-10pct '{scheme: topk, ratio: 0.1, error_feedback: true}'
run topk-1pct '{scheme: topk, ratio: 0.01, error_feedback: true}'
# shellcheck disable=SC2086
$FEDSIM summary $dirs --target "$target" | tee "$out/summary.txt"
# shellcheck disable=SC2086
$FEDSIM plot $dirs --target "$target" --plot-logx --out "$out/overlay"
echo "overlay: $out/overlay/acc_bytes.png"
