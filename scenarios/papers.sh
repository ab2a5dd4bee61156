#!/bin/sh
# scenarios/papers.sh -- the seed papers' full-length comparisons as resumable campaigns, run by
# hand: each campaign is a few `fedsim sweep`s over the methods of a paper's table on its scenario,
# checkpointed every 5 wall minutes. Stopped anywhere (Ctrl-C, SIGTERM, a session's end) and started
# again with the same command, a campaign keeps the runs that finished, resumes the one that was
# stopped and runs the rest, byte-identical to an uninterrupted campaign. It ends with one
# `fedsim summary` table of all its runs (mean personalized accuracy, as the papers report).
#   sh scenarios/papers.sh CAMPAIGN [WORKERS]        (runs in runs/papers/CAMPAIGN/; WORKERS [2])
#   sh scenarios/papers.sh CAMPAIGN --report         (only the table, from what has finished)
#   FEDSIM=/path/to/fedsim sh scenarios/papers.sh ...  (a fixed binary: no rebuild mid-campaign)
#   FEDSIM_RUNS=/var/tmp/fedsim-runs sh scenarios/papers.sh ...  (runs in FEDSIM_RUNS/papers/
#                    CAMPAIGN/ [runs]: a folder outside the work tree outlives a fresh checkout
#                    on the same machine, and with it a stopped run's checkpoint; absolute, or
#                    from the repository's root, and without spaces)
#   OPENBLAS_CORETYPE=SkylakeX sh scenarios/papers.sh ...  (OpenBLAS's kernels: unset, fedsim
#                    picks those of the CPU's widest vector units; README, "Throughput")
# A campaign outlives a machine: each finished run's scenario, metrics and clients files are kept
# in scenarios/results/CAMPAIGN/ (tracked; after each sweep, and by --report), and a campaign
# started where runs/ is empty takes them back first, so its sweeps skip those runs.
# Campaigns, with wall time per run on 2 cores (SpaFL's, with its own table: spafl-fmnist.sh):
#   dmpfl         DM-PFL, Dir(0.3) (spec 001, issue 9): DM-PFL+ (a DM-PFL+ run reports DM-PFL's
#                 accuracy too, acc_base_*: same training), Ditto, FedPer, LG-FedAvg, FedAvg-FT,
#                 the iter = 0 ablation, then the pathological split (2 classes a client: the
#                 same methods), then APFL on both splits; ~2.5 h a run; the report adds
#                 each run's bytes and FLOPs against FedAvg's (a cost-only run) and its
#                 accuracy under each test-time label shift; FedAvg-FT and Ditto there too
#   width-hetero  Pa3dFL Table 1, Hetero (spec 004, issue 10): FedAvg, Ditto, LG-FedAvg and pFedHN
#                 at the weakest width (minutes), then Pa3dFL, HeteroFL, FjORD, FedRolex and
#                 LocalOnly, then Table 3's ablation (Pa3dFL without the hyper-network), then
#                 Pa3dFL and HeteroFL with seed 2; with 2 workers, ~30 min (HeteroFL) to ~1-2 h
#                 a run
#   width-ideal   Table 1, Ideal (every client at width 1): Pa3dFL (the paper's Ideal settings,
#                 Hetero's p_min), then FedAvg, which is also HeteroFL's and FedRolex's row there,
#                 and FjORD; with 2 workers ~1.3 h (FedAvg), ~2 h (FjORD) a run on a Sapphire
#                 Rapids core; on an AMD EPYC (Zen 4) one Pa3dFL takes 22 s a round (~3.1 h),
#                 longer than a session: give it a FEDSIM_RUNS the machine keeps
#   pfedgate      pFedGate FMNIST (spec 000, issue 8): s = 0.5, 0.3, 1, then FedAvg-FT (its run
#                 reports FedAvg's accuracy too) and Local, then pFedGate (budgets from capacity,
#                 and with the weak phones' raised to 0.3) and FedAvg on the phone/laptop mix;
#                 ~1-2 h a run
set -e
cd "$(dirname "$0")/.."
FEDSIM=${FEDSIM:-./build/release/fedsim} # a copy keeps a long campaign off later rebuilds
campaign=${1:?usage: sh scenarios/papers.sh CAMPAIGN [WORKERS | --report]}
workers=${2:-2}
out=${FEDSIM_RUNS:-runs}/papers/$campaign
kept=scenarios/results/$campaign

finished() { [ "$(wc -l 2>/dev/null <"$1/clients.tsv")" -gt 1 ] 2>/dev/null; }

# keep: copies the finished runs of $out into $kept (what a sweep's resume and the report read)
keep() {
    for d in "$out"/*/*/; do
        finished "$d" || continue
        mkdir -p "$kept/${d#"$out"/}"
        cp "$d/scenario.yaml" "$d/metrics.tsv" "$d/clients.tsv" "$kept/${d#"$out"/}"
    done
}

# sweep NAME SCENARIO ARGS...: one sweep of the campaign into $out/NAME. A sweep that fails
# (a point it refuses, a bad setting) is named at the end and the campaign goes on with the
# next, so an unattended campaign keeps its cores busy; a stop (SIGINT, SIGTERM) ends it.
# costs NAME SCENARIO ARGS...: the same, cost-only (seconds), for a cost table, not the summary.
failed=""
finish() {
    if [ -n "$failed" ]; then
        echo "papers.sh: these sweeps failed (their messages are above):$failed" >&2
        exit 1
    fi
    exit 0
}
run_sweep() {
    name=$1
    file=$2
    shift 2
    status=0
    $FEDSIM sweep "scenarios/$file" --out "$out/$name" --plots none "$@" || status=$?
    [ "$status" -ge 128 ] && exit "$status"
    [ "$status" -ne 0 ] && failed="$failed $name"
    keep
}
sweep() {
    dirs="$dirs $out/$1/*/"
    [ "$workers" = --report ] && return 0
    run_sweep "$@" --workers "$workers" --checkpoint-minutes 5
}
costs() {
    [ "$workers" = --report ] && return 0
    run_sweep "$@" --cost-only -q
}

# the kept runs, where this machine has none of its own (-n: a run here is never overwritten)
if [ -d "$kept" ]; then
    mkdir -p "$out"
    cp -Rn "$kept/." "$out/"
fi

[ "$workers" = --report ] || [ "$FEDSIM" != ./build/release/fedsim ] || make --no-print-directory
dirs=""
case $campaign in
dmpfl)
    target=0.8
    # each method at its better learning-rate decay (dmpfl-fmnist.yaml says how it was chosen)
    d99="--set algorithm.lr_decay=0.99"
    # the cost table's reference, FedAvg, priced cost-only (seconds): its jobs' FLOPs and its
    # messages do not depend on what it learns
    costs costs dmpfl-fmnist.yaml --vary algorithm.name=fedavg
    # FedAvg-FT fine-tunes E = 5 epochs before each evaluation, so it is evaluated every 100
    # rounds only (each evaluation fine-tunes every client once per shift)
    ft="--set algorithm.name=fedavg-ft --set eval.every=100 --vary algorithm.finetune.epochs=5"
    sweep methods dmpfl-fmnist.yaml --vary algorithm.name=dmpfl+,ditto
    # shellcheck disable=SC2086
    sweep decayed dmpfl-fmnist.yaml $d99 --vary algorithm.name=fedper,lg-fedavg
    # shellcheck disable=SC2086
    sweep finetuned dmpfl-fmnist.yaml $ft
    # DM-PFL+ runs stand for DM-PFL too: the same training, and DM-PFL's evaluation in their
    # acc_base_* columns (its summary row "[base dmpfl]")
    sweep ablation dmpfl-fmnist.yaml --set algorithm.name=dmpfl+ \
        --vary algorithm.dmpfl.iterations=0
    path="partition={scheme: shards, clients: 100, shards: 2, local_test: 0.25,
        local_test_from_train: true}"
    # FedAvg on the pathological split, for its cost rows (its clients hold other sample counts)
    costs costs-pathological dmpfl-fmnist.yaml --set "$path" --vary algorithm.name=fedavg
    sweep pathological dmpfl-fmnist.yaml --set "$path" --vary algorithm.name=dmpfl+,ditto
    # shellcheck disable=SC2086
    sweep pathological-decayed dmpfl-fmnist.yaml --set "$path" $d99 \
        --vary algorithm.name=fedper,lg-fedavg
    # shellcheck disable=SC2086
    sweep pathological-finetuned dmpfl-fmnist.yaml --set "$path" $ft
    # APFL (added after the rest ran), without decay as Ditto, the other method that trains a
    # personal model beside the global one
    sweep apfl dmpfl-fmnist.yaml --vary algorithm.name=apfl
    sweep pathological-apfl dmpfl-fmnist.yaml --set "$path" --vary algorithm.name=apfl
    ;;
width-hetero | width-ideal)
    target=0.85
    if [ "$campaign" = width-hetero ]; then
        # the 1/16-wide baselines first: minutes, not hours (LG-FedAvg there too: the paper
        # does not say how it meets capacities, so it trains what every client can hold)
        sweep weakest width-fmnist.yaml --set model=pa3dfl-cnn@0.0625 \
            --vary algorithm.name=fedavg,ditto,lg-fedavg,pfedhn
        # pFedHN evaluated as FLGo's logger does (each client's model as its last job left it)
        sweep pfedhn-eval width-fmnist.yaml --set model=pa3dfl-cnn@0.0625 \
            --set algorithm.name=pfedhn --vary algorithm.pfedhn.eval=trained
        # Pa3dFL before the width family: the comparison is about it (with 2 workers each of
        # these takes 1-2 hours)
        sweep pa3dfl width-fmnist.yaml --vary algorithm.name=pa3dfl
        sweep methods width-fmnist.yaml --vary algorithm.name=heterofl,fjord,fedrolex,local
        sweep ablation width-fmnist.yaml --set algorithm.name=pa3dfl --vary algorithm.pa3dfl.hn=false
        # Pa3dFL and HeteroFL a second time, with another seed (data split, capacities, draws):
        # one seed each leaves them within each other's spread
        sweep seeds width-fmnist.yaml --vary algorithm.name=pa3dfl,heterofl --vary seed=2
    else # Pa3dFL first (FedAvg's run is done): the comparison is about it. It runs with the
        # paper's Fashion-MNIST Ideal configuration (its Table 7: λ 0.01, γ 0.1, an encoder of
        # depth 3; the defaults are its Hetero one) and Hetero's p_min, 1/16 (spec 004, A5's
        # override): the rule's p_min = 1 makes every factor full rank, and those diverge in
        # the first round at lr 0.1
        sweep pa3dfl width-fmnist.yaml --set devices.capacity=1 \
            --set algorithm.pa3dfl.lambda=0.01 --set algorithm.pa3dfl.hn_lr=0.1 \
            --set algorithm.pa3dfl.depth=3 --set algorithm.pa3dfl.p_min=0.0625 \
            --vary algorithm.name=pa3dfl
        # every client holds the full model: at width 1 HeteroFL and FedRolex are FedAvg bit
        # for bit (tests/test_fl_width.c), so FedAvg's run is their row too
        sweep methods width-fmnist.yaml --set devices.capacity=1 \
            --vary algorithm.name=fedavg,fjord
    fi
    ;;
pfedgate)
    target=0.8
    # every method with the kept momentum of the released code, each at its learning rate
    # (pfedgate-fmnist.yaml says how they were chosen): pFedGate's model 0.3 at every budget,
    # the baselines 0.1
    sweep gate pfedgate-fmnist.yaml --vary algorithm.pfedgate.s=0.5,0.3,1
    # FedAvg-FT's run is FedAvg's too (its acc_base_* columns, summary row "[base fedavg]")
    sweep baselines pfedgate-fmnist.yaml --set algorithm.lr=0.1 \
        --vary algorithm.name=fedavg-ft,local
    # the device mix: budgets from the devices, against FedAvg on the devices that hold the
    # dense model (the weak phones cannot)
    sweep mix pfedgate-fmnist-mix.yaml --vary algorithm.name=pfedgate
    # the weak phones' budget, 0.075, leaves the gate nothing to choose (their models reach one
    # class); at the paper's smallest budget, 0.3, they learn
    sweep mix-floor pfedgate-fmnist-mix.yaml --set algorithm.name=pfedgate \
        --vary devices.profiles.weak.capacity=0.3
    # (gradients clipped at 10, as pFedGate's are: without, FedAvg's loss became NaN in round
    # 155 of this mix)
    sweep mix-baseline pfedgate-fmnist-mix.yaml --set algorithm.lr=0.1 --set algorithm.clip=10 \
        --vary algorithm.name=fedavg
    # what a budget does to a round on the mix, priced cost-only (seconds): one budget for all
    # (s = 1 leaves out the weak phones, as FedAvg does) or each device's capacity
    costs mix-costs pfedgate-fmnist-mix.yaml --set rounds=20 \
        --vary algorithm.pfedgate.s=1,0.5,0.3,capacity
    ;;
*)
    echo "papers.sh: unknown campaign '$campaign' (dmpfl, width-hetero, width-ideal, pfedgate;" \
        "SpaFL's is scenarios/spafl-fmnist.sh)" >&2
    exit 2
    ;;
esac
[ "$workers" = --report ] && keep
# finished runs (clients.tsv gets its rows at the end)
done_dirs=""
for d in $dirs; do
    if finished "$d"; then
        done_dirs="$done_dirs ${d%/}"
    elif [ -f "$d/scenario.yaml" ]; then # started here: how far it got (its last evaluation)
        last=0
        [ -f "$d/metrics.tsv" ] &&
            last=$(awk -F '\t' '$1 ~ /^[0-9]+$/ { r = $1 } END { print r + 0 }' "$d/metrics.tsv")
        echo "papers.sh: unfinished: ${d%/} (evaluated to round $last of" \
            "$(sed -n 's/^rounds: //p' "$d/scenario.yaml"))"
    fi
done
if [ -z "$done_dirs" ]; then
    echo "papers.sh: no finished run in $out yet"
    finish
fi
# shellcheck disable=SC2086
$FEDSIM summary --raw $done_dirs --target "$target" --acc personalized | tee "$out/summary.txt"
# the paper's figure beside each run's final and best (Pa3dFL's Table 1, Fashion-MNIST; its
# Table 3 for the ablation); DM-PFL's and pFedGate's papers have no Fashion-MNIST table
w=algorithm.name
case $campaign in
width-hetero)
    paper="weakest/$w=fedavg 87.76 weakest/$w=ditto 86.51 weakest/$w=lg-fedavg 78.21
        weakest/$w=pfedhn 82.51 pfedhn-eval/algorithm.pfedhn.eval=trained 82.51
        methods/$w=heterofl 85.66 methods/$w=fedrolex 87.40 methods/$w=local 74.98
        methods/$w=fjord 90.11 ablation/algorithm.pa3dfl.hn=false 78.94 pa3dfl/$w=pa3dfl 89.55
        seeds/$w=pa3dfl,seed=2 89.55 seeds/$w=heterofl,seed=2 85.66"
    ;;
width-ideal) # FedAvg's run is HeteroFL's and FedRolex's row too (a '#' names the row)
    paper="methods/$w=fedavg 91.71 methods/$w=fedavg#heterofl 90.56
        methods/$w=fedavg#fedrolex 91.78 methods/$w=fjord 91.04 pa3dfl/$w=pa3dfl 91.04"
    ;;
*) paper="" ;;
esac
if [ -n "$paper" ]; then
    echo
    # at_val: the test accuracy at the evaluation with the best validation accuracy, the
    # paper's own figure (runs with partition.local_val; "-" for those without)
    awk -v out="$out/" -v paper="$paper" '
        BEGIN { n = split(paper, p, " ")
                for (i = 1; i < n; i += 2) { key[++m] = p[i]; ref[m] = p[i + 1] }
                printf "%-44s %8s %8s %8s %8s %8s %12s\n", "run", "final", "best", "at_val",
                    "paper", "final-paper", "at_val-paper" }
        /^$/ { exit }
        index($1, out) == 1 { r = substr($1, length(out) + 1)
              for (i = 1; i <= m; i++) {
                  run = key[i]
                  sub(/#.*/, "", run)
                  if (run != r) continue
                  v = $10 == "-" ? "-" : sprintf("%.2f", 100 * $10)
                  d = $10 == "-" ? "-" : sprintf("%+.2f", 100 * $10 - ref[i])
                  printf "%-44s %8.2f %8.2f %8s %8.2f %+8.2f %12s\n", key[i], 100 * $2,
                      100 * $3, v, ref[i], 100 * $2 - ref[i], d } }' "$out/summary.txt" |
        tee -a "$out/summary.txt"
fi
if [ "$campaign" = pfedgate ] && [ -d "$out/mix-costs" ]; then
    # a round's simulated time, upload and client FLOPs on the mix under each budget, and the
    # clients left out (their devices cannot hold the model they would train)
    echo
    for d in "$out"/mix-costs/*/; do
        finished "$d" || continue
        d=${d%/}
        printf '%s\t%s\t' "${d#"$out"/}" \
            "$(awk -F '\t' 'NR > 1 && $3 == 1' "$d/clients.tsv" | wc -l)"
        tail -n 1 "$d/metrics.tsv"
    done | awk -F '\t' '
        BEGIN { printf "%-44s %8s %9s %12s %12s\n", "run (cost-only)", "excluded", "s/round",
                    "bytes up/rd", "FLOPs/round" }
        { printf "%-44s %8d %9.2f %12.4g %12.4g\n", $1, $2, $4 / $3, $5 / $3, $7 / $3 }' |
        tee -a "$out/summary.txt"
fi
ref="$out/costs/algorithm.name=fedavg/metrics.tsv"
pref="$out/costs-pathological/algorithm.name=fedavg/metrics.tsv"
if [ "$campaign" = dmpfl ] && [ -f "$ref" ]; then
    # bytes (up + down) and client FLOPs over the whole run against FedAvg's on the same split
    # (DM-PFL's claim); the pathological runs against the Dir(0.3) FedAvg until theirs ran
    [ -f "$pref" ] || pref=$ref
    echo
    for d in $done_dirs; do
        printf '%s\t' "${d#"$out"/}"
        tail -n 1 "$d/metrics.tsv"
    done | awk -F '\t' -v ref="$(tail -n 1 "$ref")" -v pref="$(tail -n 1 "$pref")" '
        BEGIN { split(ref, r, "\t"); rb = r[3] + r[4]; rf = r[5]
                split(pref, r, "\t"); pb = r[3] + r[4]; pf = r[5]
                printf "%-44s %12s %8s %12s %8s\n", "run", "bytes", "/FedAvg", "FLOPs", "/FedAvg"
                printf "%-44s %12.4g %8s %12.4g %8s\n", "fedavg (cost-only)", rb, "1", rf, "1"
                printf "%-44s %12.4g %8s %12.4g %8s\n", "pathological: fedavg (cost-only)", pb,
                    "1", pf, "1" }
        { b = $4 + $5; p = $1 ~ /^pathological/; B = p ? pb : rb; F = p ? pf : rf
          printf "%-44s %12.4g %7.1f%% %12.4g %7.1f%%\n", $1, b, 100 * b / B, $6, 100 * $6 / F }' |
        tee -a "$out/summary.txt"
fi
# the last evaluation's columns the paper's table reports, by name: DM-PFL's accuracy under each
# test-time label shift and the bottom decile; pFedGate's mean, pooled (its "Acc") and bottom
# decile and the density achieved
case $campaign in
dmpfl)
    cols="acc_shift_0 acc_shift_0.5 acc_shift_1 acc_pers_p10"
    cols="$cols acc_base_shift_0 acc_base_shift_0.5 acc_base_shift_1 acc_base_p10"
    ;;
pfedgate) cols="acc_pers_mean acc_pers_pooled acc_pers_p10 density acc_base_mean acc_base_p10" ;;
*) cols="" ;;
esac
if [ -n "$cols" ]; then
    echo
    for d in $done_dirs; do
        printf '%s\t' "${d#"$out"/}"
        sed -n 2p "$d/metrics.tsv"
        printf '%s\t' "${d#"$out"/}"
        tail -n 1 "$d/metrics.tsv"
    done | awk -F '\t' -v cols="$cols" '
        BEGIN { n = split(cols, want, " ") }
        NR % 2 == 1 { for (i = 2; i <= NF; i++) col[$i] = i; next }
        NR == 2 { printf "%-44s", "run"; for (j = 1; j <= n; j++) printf " %15s", want[j]
                  printf "\n" }
        { printf "%-44s", $1; for (j = 1; j <= n; j++)
              if (want[j] in col) printf " %15.4f", $(col[want[j]]); else printf " %15s", "-"
          printf "\n"; delete col }' | tee -a "$out/summary.txt"
fi
finish
