#!/bin/sh
# scenarios/spafl-fmnist.sh -- the SpaFL paper's FMNIST comparison (spec 003, Tables 2 and 3), run
# by hand: SpaFL, FedAvg and SpaFL without Eq. 13 on the same split, devices and seeds, then one
# table row per run from its metrics.tsv. Each run takes 1-2 hours on 2 cores.
#   sh scenarios/spafl-fmnist.sh [SEEDS...]            (default seed 1; runs go to runs/spafl-fmnist/)
#   sh scenarios/spafl-fmnist.sh --report DIR...        (only the table, for finished run folders)
# Columns: final and best mean personalized accuracy, density at the best round (unweighted mean of
# per-layer keep ratios), total bytes up+down, total client FLOPs, and the simulated time at which
# the mean personalized accuracy first reached 85%.
set -e
cd "$(dirname "$0")/.."
FEDSIM=./build/release/fedsim

report() {
    printf '%-28s %8s %8s %8s %14s %12s %12s\n' run final best density bytes flops t85_s
    for d in "$@"; do
        awk -F'\t' -v run="$(basename "$d")" '
            /^#/ { next }
            $1 == "round" { for (i = 1; i <= NF; i++) c[$i] = i; next }
            {
                acc = $(c["acc_pers_mean"]); if (acc == "nan") acc = $(c["acc_global"])
                if (best == "" || acc > best) { best = acc; dens = $(c["density"]) }
                if (t85 == "" && acc >= 0.85) t85 = $(c["sim_time_s"])
                final = acc; bytes = $(c["bytes_up"]) + $(c["bytes_down"]); flops = $(c["client_flops"])
            }
            END { printf "%-28s %8.4f %8.4f %8.4f %14.0f %12.4g %12s\n", run, final, best, dens,
                         bytes, flops, t85 == "" ? "not reached" : t85 }' "$d/metrics.tsv"
    done
}

if [ "$1" = "--report" ]; then
    shift
    report "$@"
    exit 0
fi
make --no-print-directory
seeds=${*:-1}
out=runs/spafl-fmnist
mkdir -p "$out"
dirs=""
for s in $seeds; do
    for v in "spafl:" "fedavg:--set algorithm.name=fedavg" \
             "spafl-noeq13:--set algorithm.spafl.eq13=false"; do
        name=${v%%:*}
        sets=${v#*:}
        start=$(date +%s)
        # shellcheck disable=SC2086
        $FEDSIM run scenarios/spafl-fmnist.yaml --seed "$s" $sets --plots none \
            --out "$out/$name-$s" >"$out/$name-$s.log" 2>&1
        echo "$name seed $s: $(($(date +%s) - start)) s wall" | tee -a "$out/wall.txt"
        dirs="$dirs $out/$name-$s"
    done
done
# shellcheck disable=SC2086
report $dirs
