#!/bin/sh
# scenarios/selection.sh [SEED...] -- time to accuracy of client selection policies on
# scenarios/selection.yaml: uniform, oort and fastest, each seed (default 1), then per run the
# simulated time and round at which the global accuracy first reaches $TARGET (default 0.75),
# the final accuracy, and one overlay plot ($OUT: acc_time.png, to_target.png).
# FEDSIM (default build/release/fedsim) and OUT (default runs/selection) may be set.
set -e
FEDSIM=${FEDSIM:-build/release/fedsim}
OUT=${OUT:-runs/selection}
TARGET=${TARGET:-0.75}
[ $# -gt 0 ] || set -- 1
mkdir -p "$OUT"
runs=""
for seed in "$@"; do
    for p in uniform oort fastest; do
        d="$OUT/$p-$seed"
        if [ ! -s "$d/clients.tsv" ]; then
            nice "$FEDSIM" run scenarios/selection.yaml -q --plots none --out "$d" --seed "$seed" \
                --set federation.selection.name="$p" >/dev/null
        fi
        runs="$runs $d"
    done
done
printf '%-22s %12s %8s %10s\n' run time_to_target rounds final_acc
for d in $runs; do
    # metrics.tsv: a comment line, the header, then one row per evaluation
    awk -F'\t' -v t="$TARGET" -v name="$(basename "$d")" '
        /^#/ { next }
        !h { for (i = 1; i <= NF; i++) col[$i] = i; h = 1; next }
        { acc = $col["acc_global"]; last = acc
          if (!hit && acc != "nan" && acc + 0 >= t) { hit = 1; tt = $col["sim_time_s"]; rr = $col["round"] } }
        END { printf "%-22s %12s %8s %10.4f\n", name, hit ? sprintf("%.1f s", tt) : "never", hit ? rr : "-", last }
    ' "$d/metrics.tsv"
done
"$FEDSIM" plot $runs --out "$OUT" --target "$TARGET" >/dev/null 2>&1 || echo "(no plot: gnuplot missing?)"
