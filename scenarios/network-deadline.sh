#!/bin/sh
# scenarios/network-deadline.sh -- round deadlines under a shared server downlink (issue 43), run
# by hand: scenarios/network.yaml's cnn2, cost-only, 100 clients a round on a phone-low /
# phone-mid / laptop mix (40/40/20%, 2,000 clients), 10 rounds, at each deadline in DEADLINES
# (seconds) and without one, once with the 1 Gbps server downlink shared and once with it
# unlimited (every client on its own link, as without `network:`). A row per deadline: the share
# of jobs that missed it (clients.tsv: 1 - aggregated / jobs, the jobs late or still on their way
# when the run ended), the mean round time and the updates aggregated per simulated second, both
# ways; then the missed share and the updates per second against the deadline in one figure. Each run's warnings (fedsim check's: a device that can never meet the deadline) go
# to its folder's .log.
#   sh scenarios/network-deadline.sh            (about a minute: cost-only)
#   DEADLINES="5 10 20" sh scenarios/network-deadline.sh
# Runs go to runs/network/dl-shared-D and dl-alone-D, the table to runs/network/deadline.txt
# (and deadline.tsv), the figure to runs/network/deadline.png.
set -e
cd "$(dirname "$0")/.."
FEDSIM=${FEDSIM:-./build/release/fedsim} # FEDSIM=/path/to/fedsim: a fixed binary, no rebuild
DEADLINES=${DEADLINES:-"4 6 8 10 12 14 16 18 20 25 30"}
out=runs/network
[ "$FEDSIM" != ./build/release/fedsim ] || make --no-print-directory
mkdir -p "$out"
mix='devices.mix=[{profile: phone-low, share: 0.4}, {profile: phone-mid, share: 0.4}, '\
'{profile: laptop, share: 0.2}]'

# RUN: the share of its jobs not aggregated, and the mean round time (the last row's time over its
# rounds)
late_share() {
    awk -F'\t' '!/^#/ && $1 != "client" { j += $4; a += $6 } END { printf "%.4f", j ? 1 - a / j : 0 }' \
        "$1/clients.tsv"
}
agg_rate() { # RUN: updates aggregated over the run's simulated time
    t=$(awk -F'\t' '!/^#/ && $1 != "round" { t = $2 } END { print t }' "$1/metrics.tsv")
    awk -F'\t' -v t="$t" '!/^#/ && $1 != "client" { a += $6 } END { printf "%.3f", a / t }' \
        "$1/clients.tsv"
}
mean_round() {
    awk -F'\t' '!/^#/ && $1 != "round" { r = $1; t = $2 } END { printf "%.3f", t / r }' \
        "$1/metrics.tsv"
}

printf 'deadline_s\tmissed_shared\tmissed_alone\tround_shared_s\tround_alone_s\tagg_per_s_shared\tagg_per_s_alone\n' \
    >"$out/deadline.tsv"
for d in $DEADLINES none; do
    for how in shared alone; do
        extra=""
        [ $how = shared ] || extra="network.server.down=1000 Tbps"
        dl="federation.deadline=$d s"
        [ "$d" != none ] || dl="federation.deadline=none"
        $FEDSIM run scenarios/network.yaml -q --plots none --set rounds=10 \
            --set federation.per_round=100 --set "$mix" --set "$dl" \
            ${extra:+--set "$extra"} --out "$out/dl-$how-$d" >/dev/null 2>"$out/dl-$how-$d.log"
    done
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "$(late_share "$out/dl-shared-$d")" \
        "$(late_share "$out/dl-alone-$d")" "$(mean_round "$out/dl-shared-$d")" \
        "$(mean_round "$out/dl-alone-$d")" "$(agg_rate "$out/dl-shared-$d")" \
        "$(agg_rate "$out/dl-alone-$d")" >>"$out/deadline.tsv"
done
awk -F'\t' '{ printf "%10s %13s %12s %14s %13s %16s %15s\n", $1, $2, $3, $4, $5, $6, $7 }' \
    "$out/deadline.tsv" |
    tee "$out/deadline.txt"

# the figure: late share and round time against the deadline (the header and the row without a
# deadline are not numbers, so gnuplot leaves them out)
if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 1000,420 noenhanced font 'sans,11'
set output '$out/deadline.png'
set datafile separator "\t"
set multiplot layout 1,2 title 'cnn2, 100 a round on a phone/laptop mix: 1 Gbps server downlink shared vs own links'
set grid
set xlabel 'round deadline (s)'
set key top right
set ylabel 'jobs that missed the deadline (share)'
set yrange [0:1]
plot '$out/deadline.tsv' using 1:2 with linespoints lw 2 pt 7 title 'shared downlink', \
     '' using 1:3 with linespoints lw 2 pt 5 title 'own links'
set ylabel 'updates aggregated per simulated second'
set yrange [0:*]
set key bottom right
plot '$out/deadline.tsv' using 1:6 with linespoints lw 2 pt 7 title 'shared downlink', \
     '' using 1:7 with linespoints lw 2 pt 5 title 'own links'
unset multiplot
EOF
    echo "figure: $out/deadline.png"
fi
