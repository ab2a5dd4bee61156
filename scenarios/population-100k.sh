#!/bin/sh
# scenarios/population-100k.sh -- issue 41's 100,000-client personalized run, by hand: Ditto on
# scenarios/population-100k.yaml with 2 GiB of states kept in memory (the rest in the run's
# state.mdb), checkpointing every round. It writes runs/population-100k-data/ once (Fashion-MNIST's
# training set ten times over), then reports the run's wall time and its peak RSS (sampled every
# 2 s) and its largest checkpoint file; the run's own last lines say what its clients' states took
# in memory and on disk.
#   sh scenarios/population-100k.sh [--state-memory SIZE] [other fedsim run options]
set -e
cd "$(dirname "$0")/.."
BIN=${FEDSIM_BIN:-build/release/fedsim}
SRC=/usr/share/datasets/fashion-mnist
DATA=$PWD/runs/population-100k-data
OUT=runs/population-100k
[ -x "$BIN" ] || make "$BIN"
if [ ! -s "$DATA/train-labels.gz" ]; then
    mkdir -p "$DATA"
    # an IDX file's header is its magic and its dimensions (big-endian); the first is the count
    python3 - "$SRC" "$DATA" <<'PY'
import gzip, struct, sys
src, out = sys.argv[1], sys.argv[2]
for name, dst in (("train-images-idx3-ubyte.gz", "train-images.gz"),
                  ("train-labels-idx1-ubyte.gz", "train-labels.gz")):
    raw = gzip.open(f"{src}/{name}").read()
    dims = raw[3]
    head = list(struct.unpack(f">{dims}I", raw[4:4 + 4 * dims]))
    body = raw[4 + 4 * dims:]
    head[0] *= 10
    with gzip.open(f"{out}/{dst}.tmp", "wb", compresslevel=1) as f:
        f.write(raw[:4] + struct.pack(f">{dims}I", *head) + body * 10)
    import os
    os.replace(f"{out}/{dst}.tmp", f"{out}/{dst}")
PY
fi
rm -rf "$OUT"
start=$(date +%s)
"$BIN" run scenarios/population-100k.yaml --out "$OUT" --plots none --checkpoint-every 1 \
    --state-memory 2GiB \
    --set "dataset.train_images=$DATA/train-images.gz" \
    --set "dataset.train_labels=$DATA/train-labels.gz" \
    --set "dataset.test_images=$SRC/t10k-images-idx3-ubyte.gz" \
    --set "dataset.test_labels=$SRC/t10k-labels-idx1-ubyte.gz" "$@" \
    2> "$OUT.err" &
# the run's own peak resident set (VmHWM) from its status file, and its largest checkpoint file
# (each stays until the next replaces it)
pid=$!
rss=0
ck=0
while kill -0 $pid 2> /dev/null; do
    r=$(awk '/VmHWM/ {print $2}' /proc/$pid/status 2> /dev/null || echo 0)
    [ -n "$r" ] && [ "$r" -gt "$rss" ] && rss=$r
    c=$(stat -c %s "$OUT/checkpoint.msgpack" 2> /dev/null || echo 0)
    [ "$c" -gt "$ck" ] && ck=$c
    sleep 2
done
wait $pid
tail -n 4 "$OUT.err"
echo "population-100k: $(($(date +%s) - start)) s wall; peak RSS $((rss / 1024)) MiB;" \
    "largest checkpoint $((ck / 1024)) KiB"
