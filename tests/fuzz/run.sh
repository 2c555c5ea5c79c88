#!/usr/bin/env bash
# run.sh - every fuzz target under libFuzzer, for a bounded time.
#
#   tests/fuzz/run.sh [SECONDS]
#
# Builds build-fuzz/ with clang, every object instrumented for libFuzzer and
# built with AddressSanitizer and UndefinedBehaviorSanitizer (which stops at
# its first report), then runs all the targets at once, each on a copy of its
# corpus (tests/fuzz/corpus/NAME) for SECONDS seconds (default
# $CUBE_FUZZ_SECONDS, else 60). A crash, a leak, a sanitizer's report, an
# input that runs over 10 s or a target that does not end in time fails it;
# the input that did is kept in build-fuzz/fuzz/NAME/ (crash-*, leak-*,
# timeout-*), beside the log. Writes one JUnit case a target to
# build-fuzz/fuzz.xml, which tools/count-tests.py counts; where clang has no
# libFuzzer every case is skipped. Exits 1 when a target failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-${CUBE_FUZZ_SECONDS:-60}}
build=build-fuzz
targets=()
for c in tests/fuzz/fuzz-*.c; do
        name=${c#tests/fuzz/fuzz-}
        name=${name%.c}
        [ "$name" = replay ] || targets+=("$name")
done

# One JUnit case a target: "NAME RESULT" lines on stdin, RESULT being
# passed, skipped or failed; a failed case carries the tail of its log.
junit() {
        python3 -c '
import sys
from xml.sax.saxutils import escape, quoteattr
cases = [l.split() for l in sys.stdin if l.strip()]
out = ["<testsuite name=\"fuzz\" tests=\"%d\">" % len(cases)]
for name, result in cases:
    out.append("<testcase classname=\"fuzz\" name=%s>" % quoteattr("libFuzzer " + name))
    if result == "skipped":
        out.append("<skipped message=\"no libFuzzer\"/>")
    elif result != "passed":
        try:
            log = open(sys.argv[1] + "/" + name + "/log", errors="replace").read()[-4000:]
        except OSError:
            log = ""
        out.append("<failure message=\"%s\">%s</failure>" % (result, escape(log)))
    out.append("</testcase>")
out.append("</testsuite>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
' "$build/fuzz" "$build/fuzz.xml"
}

mkdir -p "$build"
if ! command -v clang >/dev/null ||
   ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d[0] & n; }' |
        clang -x c -fsanitize=fuzzer - -o "$build/has-libfuzzer" 2>/dev/null; then
        echo "fuzz: clang with libFuzzer not found; skipped (tools/setup.sh installs it)" >&2
        printf '%s skipped\n' "${targets[@]}" | junit
        exit 0
fi
rm -f "$build/has-libfuzzer"

if [ ! -f "$build/build.ninja" ]; then
        CC=clang CXX=clang++ meson setup "$build" -Db_sanitize=address,undefined -Db_lundef=false \
                -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined' \
                -Dcpp_args='-fsanitize=fuzzer-no-link' >"$build/build.log" 2>&1 ||
                { cat "$build/build.log" >&2; echo "fuzz: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz-}" >"$build/build.log" 2>&1 ||
        { tail -50 "$build/build.log" >&2; echo "fuzz: the build failed" >&2
          printf '%s build-failed\n' "${targets[@]}" | junit; exit 1; }

echo "fuzz: ${targets[*]} for ${seconds} s each"
pids=()
for t in "${targets[@]}"; do
        dir=$build/fuzz/$t
        rm -rf "$dir"
        mkdir -p "$dir/corpus"
        cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
        # A target's own LSan suppressions (tests/fuzz/NAME.lsan.supp) need
        # whole stacks to match, which fast unwinding does not give.
        lsan=""
        asan=detect_leaks=1
        if [ -f "tests/fuzz/$t.lsan.supp" ]; then
                lsan=suppressions=$PWD/tests/fuzz/$t.lsan.supp
                asan=$asan:fast_unwind_on_malloc=0
        fi
        # libFuzzer stops itself after max_total_time; timeout is the guard
        # for a target that does not.
        ASAN_OPTIONS=$asan LSAN_OPTIONS=$lsan UBSAN_OPTIONS=print_stacktrace=1 \
                timeout -k 10 $((seconds + 120)) "$build/tests/fuzz-$t" \
                -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
                -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" >"$dir/log" 2>&1 &
        pids+=($!)
done

rc=0
results=()
for i in "${!targets[@]}"; do
        t=${targets[$i]}
        if wait "${pids[$i]}"; then
                results+=("$t passed")
                runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz/$t/log")
                echo "fuzz: $t passed (${runs:-?} inputs)"
        else
                results+=("$t failed")
                rc=1
                echo "fuzz: $t FAILED: $build/fuzz/$t/log" >&2
                tail -30 "$build/fuzz/$t/log" >&2
        fi
done
printf '%s\n' "${results[@]}" | junit
exit $rc
