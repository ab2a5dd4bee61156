#!/bin/sh
# scenarios/network.sh -- round time against per_round with the server's downlink shared (issue
# 43), run by hand: scenarios/network.yaml (2,000 laptops, cnn2, cost-only, a 1 Gbps server
# downlink) at per_round 10, 30, 100, 300 and 1,000, each also with the downlink unlimited (every
# client on its own 80 Mbps link, as without `network:`), then one row per per_round: the mean
# round time of both, the contended download time the line 8 x model bytes x per_round / 1 Gbps
# predicts, and the extra time the shared link cost against that line. Then over-commit under
# contention: 100 per round on a phone-low/phone-mid/laptop mix (40/40/20%), over_commit 1.0 to
# 2.0, mean round time (10 rounds) with the 1 Gbps downlink shared and unlimited.
#   sh scenarios/network.sh            (under a minute: cost-only)
# Runs go to runs/network/shared-K, alone-K, oc-shared-X and oc-alone-X, the tables to
# runs/network/table.txt and overcommit.txt.
set -e
cd "$(dirname "$0")/.."
FEDSIM=${FEDSIM:-./build/release/fedsim} # FEDSIM=/path/to/fedsim: a fixed binary, no rebuild
out=runs/network
[ "$FEDSIM" != ./build/release/fedsim ] || make --no-print-directory
mkdir -p "$out"
bw=1e9 # the scenario's server downlink, bit/s
rows=""
for k in 10 30 100 300 1000; do
    $FEDSIM run scenarios/network.yaml -q --plots none --set federation.per_round=$k \
        --out "$out/shared-$k" >/dev/null
    $FEDSIM run scenarios/network.yaml -q --plots none --set federation.per_round=$k \
        --set "network.server.down=1000 Tbps" --out "$out/alone-$k" >/dev/null
    # mean round time: the last row's time over its rounds; the model's bytes on the wire: a
    # client's bytes_down over its jobs
    shared=$(awk -F'\t' '!/^#/ && $1 != "round" { r = $1; t = $2 } END { print t / r }' \
        "$out/shared-$k/metrics.tsv")
    alone=$(awk -F'\t' '!/^#/ && $1 != "round" { r = $1; t = $2 } END { print t / r }' \
        "$out/alone-$k/metrics.tsv")
    bytes=$(awk -F'\t' '!/^#/ && $1 != "client" && $4 > 0 { print $10 / $4; exit }' \
        "$out/shared-$k/clients.tsv")
    rows="$rows$k $shared $alone $bytes
"
done
printf '%s' "$rows" | awk -v bw=$bw '
    BEGIN { printf "%9s %12s %12s %14s %14s %12s\n", "per_round", "round_s", "alone_s",
            "8*B*K/bw_s", "round-alone_s", "own_down_s" }
    { line = 8 * $4 * $1 / bw; own = 8 * $4 / 80e6
      printf "%9d %12.3f %12.3f %14.3f %14.3f %12.3f\n", $1, $2, $3, line, $2 - $3, own
      if (NR > 1) printf "          slope %.5f s per client (8*B/bw = %.5f)\n",
                         ($2 - r) / ($1 - k), 8 * $4 / bw
      k = $1; r = $2 }' | tee "$out/table.txt"

mean_round() { # RUN: the last row's time over its rounds
    awk -F'\t' '!/^#/ && $1 != "round" { r = $1; t = $2 } END { print t / r }' "$1/metrics.tsv"
}
mix='devices.mix=[{profile: phone-low, share: 0.4}, {profile: phone-mid, share: 0.4}, '\
'{profile: laptop, share: 0.2}]'
printf '%11s %12s %12s\n' over_commit shared_s alone_s | tee "$out/overcommit.txt"
for x in 1.0 1.3 1.6 2.0; do
    for how in shared alone; do
        extra=""
        [ $how = shared ] || extra="network.server.down=1000 Tbps"
        $FEDSIM run scenarios/network.yaml -q --plots none --set rounds=10 \
            --set federation.per_round=100 --set federation.over_commit=$x --set "$mix" \
            ${extra:+--set "$extra"} --out "$out/oc-$how-$x" >/dev/null
    done
    printf '%11s %12.3f %12.3f\n' $x "$(mean_round "$out/oc-shared-$x")" \
        "$(mean_round "$out/oc-alone-$x")" | tee -a "$out/overcommit.txt"
done
