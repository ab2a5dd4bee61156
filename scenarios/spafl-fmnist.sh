#!/bin/sh
# scenarios/spafl-fmnist.sh -- the SpaFL paper's FMNIST comparison (spec 003, Tables 2 and 3), run
# by hand: SpaFL (Eq. 13 with the latest Δτ, τ and Δτ sent; and with the mean Δτ, τ alone), SpaFL
# without Eq. 13 and FedAvg on the same split, devices and seeds, then one table row per run from
# its metrics.tsv. About 45 minutes a SpaFL run on one core, 2 hours for FedAvg. Stopped and run
# again with the same arguments, it keeps the finished runs and resumes the stopped one.
#   sh scenarios/spafl-fmnist.sh [SEEDS...]    (default seed 1; runs in runs/spafl-fmnist/NAME/seed=S...)
#   sh scenarios/spafl-fmnist.sh --report DIR...        (only the table, for finished run folders)
# Columns: final mean personalized accuracy and density (unweighted mean of per-layer keep ratios),
# best accuracy and the density at its round, total bytes up+down, total client FLOPs, and the
# simulated time at which the mean personalized accuracy first reached 85%; then per variant the
# mean ± std over the seeds (fedsim summary).
set -e
cd "$(dirname "$0")/.."
FEDSIM=./build/release/fedsim

report() {
    printf '%-44s %7s %7s %7s %7s %12s %10s %10s\n' run final density best density bytes flops t85_s
    for d in "$@"; do
        # the file on stdin: a sweep folder's name (seed=1,...) would read as an awk assignment
        awk -F'\t' -v run="$(basename "$(dirname "$d")")/$(basename "$d")" '
            /^#/ { next }
            $1 == "round" { for (i = 1; i <= NF; i++) c[$i] = i; next }
            {
                acc = $(c["acc_pers_mean"]); if (acc == "nan") acc = $(c["acc_global"])
                if (best == "" || acc > best) { best = acc; bdens = $(c["density"]) }
                if (t85 == "" && acc >= 0.85) t85 = $(c["sim_time_s"])
                final = acc; dens = $(c["density"]); bytes = $(c["bytes_up"]) + $(c["bytes_down"])
                flops = $(c["client_flops"])
            }
            END { printf "%-44s %7.4f %7.4f %7.4f %7.4f %12.0f %10.4g %10s\n", run, final, dens,
                         best, bdens, bytes, flops, t85 == "" ? "not reached" : sprintf("%.1f", t85) }' \
            <"$d/metrics.tsv"
    done
}

if [ "$1" = "--report" ]; then
    shift
    report "$@"
    exit 0
fi
make --no-print-directory
seeds=$(echo "${*:-1}" | tr ' ' ',')
out=runs/spafl-fmnist
# resumable sweeps (fedsim sweep keeps finished runs and resumes a stopped one): the same command
# continues the comparison after a stop
sweep() { # NAME ARGS...
    name=$1
    shift
    $FEDSIM sweep scenarios/spafl-fmnist.yaml --out "$out/$name" --vary seed="$seeds" \
        --workers 1 --checkpoint-minutes 5 --plots none "$@"
}
sweep spafl --vary algorithm.spafl.delta=latest,mean
sweep spafl-noeq13 --set algorithm.spafl.eq13=false
sweep fedavg --set algorithm.name=fedavg
# shellcheck disable=SC2046
report $(ls -d "$out"/*/seed=*/)
# and mean ± std over the seeds of each variant
# shellcheck disable=SC2046
$FEDSIM summary $(ls -d "$out"/*/seed=*/) --target 0.85 --acc personalized | sed -n '/^group/,$p'
