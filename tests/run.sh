#!/bin/sh
# tests/run.sh -- runs every test binary given, one line each, then the suite's closing line.
# A binary fails if it exits non-zero or prints no "N passed, N failed" line (a crash mid-way).
# Output of each binary goes to build/<mode>/tests/<name>.log; failures print that log's FAIL lines,
# and a test that skips prints its SKIP line.
passed=0
failed=0
for t in "$@"; do
    log="$t.log"
    start=$(date +%s)
    "$t" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "CRASH $(basename "$t") (exit $rc, ${secs}s); see $log"
        tail -n 20 "$log"
        failed=$((failed + 1))
        continue
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -ne 0 ]; then
        echo "FAIL  $(basename "$t"): $line (${secs}s)"
        grep -E '^FAIL|ERROR|runtime error' "$log" | head -n 20
    else
        echo "ok    $(basename "$t"): $line (${secs}s)"
    fi
    grep '^SKIP' "$log" # a test that could not run says why

done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
