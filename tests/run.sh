#!/bin/sh
# tests/run.sh -- runs every test binary given, one line each, then the suite's closing line.
# Usage: run.sh BIN... [-- BIN...]. The binaries after "--" (the numerical suites) run a second
# time under other BLAS kernels: Prescott, OpenBLAS's generic ones, or when the first pass ran on
# those, another set this CPU can run. A check that passes or fails with the kernels' rounding
# then fails on any machine, not only on a CPU that happens to get other kernels.
# A binary fails if it exits non-zero or prints no "N passed, N failed" line (a crash mid-way), or
# if, with OPENBLAS_CORETYPE unset, it ran on other kernels than $FEDSIM_BIN does (tests/check.h).
# Each line names the kernels that ran. Output goes to build/<mode>/tests/<name>.log (the second
# pass: <name>.<kernels>.log); failures print that log's FAIL lines, and a skipping test its SKIP.
passed=0
failed=0
first=""   # the kernels of the first pass's numerical suites
product="" # the kernels fedsim runs on, when the caller chose none
if [ -z "$OPENBLAS_CORETYPE" ] && [ -n "$FEDSIM_BIN" ]; then
    product=$("$FEDSIM_BIN" help 2>/dev/null | sed -n 's/.*In use here: \(.*\)\.$/\1/p')
fi

# run BIN LOG [KERNELS]: one binary (on KERNELS if given), one line; sets $kernels
run() {
    t=$1
    log=$2
    start=$(date +%s)
    if [ -n "$3" ]; then
        OPENBLAS_CORETYPE=$3 "$t" >"$log" 2>&1
    else
        "$t" >"$log" 2>&1
    fi
    rc=$?
    secs=$(( $(date +%s) - start ))
    kernels=$(sed -n 's/^BLAS kernels: //p' "$log" | head -n 1)
    name="$(basename "$t") [${kernels:-?}]"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "CRASH $name (exit $rc, ${secs}s); see $log"
        tail -n 20 "$log"
        failed=$((failed + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -ne 0 ]; then
        echo "FAIL  $name: $line (${secs}s)"
        grep -E '^FAIL|ERROR|runtime error' "$log" | head -n 20
    else
        echo "ok    $name: $line (${secs}s)"
    fi
    grep '^SKIP' "$log" # a test that could not run says why
}

again=""
for t in "$@"; do
    if [ "$t" = "--" ]; then
        again=1
        break
    fi
    run "$t" "$t.log"
    if [ -n "$product" ] && [ -n "$kernels" ] && [ "$kernels" != "$product" ]; then
        echo "FAIL  $(basename "$t"): ran on $kernels kernels, fedsim on $product"
        failed=$((failed + 1))
    fi
    case $(basename "$t") in test_nn_* | test_fl_*) first=${first:-$kernels} ;; esac
done

if [ -n "$again" ]; then
    second=Prescott
    if [ "$first" = Prescott ]; then
        flags=$(grep -m 1 '^flags' /proc/cpuinfo)
        case " $flags " in
        *" avx "*) second=Sandybridge ;;
        *" sse4_2 "*) second=Nehalem ;;
        *) second=Core2 ;;
        esac
    fi
    if [ "$(uname -m)" != x86_64 ]; then
        echo "SKIP  second pass: OpenBLAS's x86 kernels cannot run on $(uname -m)"
    else
        seen=""
        for t in "$@"; do
            if [ -z "$seen" ]; then
                [ "$t" = "--" ] && seen=1
                continue
            fi
            run "$t" "$t.$second.log" "$second"
        done
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
