#!/usr/bin/env bash
# check-gpu-check.sh - a dry run of tools/gpu-check: packed from this build,
# run with a stand-in nvidia-smi and the CUDA driver's test double, it must
# finish inside its caps and leave exactly its two files. The integration
# suites run with the harness skipping what the double cannot do (kernel
# bodies never run there), and must pass.
#
#   check-gpu-check.sh SOURCE_ROOT BUILD_DIR DOUBLE_DIR
set -uo pipefail
root=$1 build=$2 double=$3
tmp=$(mktemp -d /tmp/cube-gpucheck-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$root/tools/gpu-check" pack --from "$build" --to "$tmp/pack" > "$tmp/pack.log" 2>&1 || {
        cat "$tmp/pack.log"; echo "FAIL: pack"; exit 1; }

mkdir -p "$tmp/stand-in"
cat > "$tmp/stand-in/nvidia-smi" <<'SMI'
#!/bin/sh
# A stand-in: the facts a real one prints, for a dry run.
case "$*" in
*--query-gpu*) echo "cube CUDA test double, 0.0 (stand-in), Disabled, 2048 MiB" ;;
*) echo "stand-in nvidia-smi: no GPU here" ;;
esac
SMI
chmod +x "$tmp/stand-in/nvidia-smi"

start=$(date +%s)
PATH="$tmp/stand-in:$PATH" LD_LIBRARY_PATH="$double" OUT="$tmp/out" \
        CUBE_TEST_DRIVER=double CUBE_CUDA_DOUBLE_MEMORY=4294967296 \
        GPU_CHECK_SUITES="${GPU_CHECK_SUITES:-daemon memory failures sharing graphs}" \
        GPU_CHECK_BENCH="${GPU_CHECK_BENCH:-sync}" GPU_CHECK_BENCH_RUNS=1 \
        timeout -k 5 570 "$tmp/pack/gpu-check" run 0 > "$tmp/run.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$tmp/run.log"
files=$(cd "$tmp/out" && ls -A | sort | tr '\n' ' ')
fail=0
[ "$rc" -eq 0 ] || { echo "FAIL: gpu-check run exited $rc"; fail=1; }
[ "$files" = "gpu-check-logs.tar.gz gpu-check-summary.txt " ] || {
        echo "FAIL: it left '$files', not its two files"; fail=1; }
# The caps add up to 545 s; the summary ends the output.
((took <= 550)) || { echo "FAIL: it took $took s, past its caps"; fail=1; }
tail -n 1 "$tmp/run.log" | grep -q '^total [0-9]* s$' || {
        echo "FAIL: the summary is not printed last"; fail=1; }
grep -q '^backend: rc 0 ' "$tmp/out/gpu-check-summary.txt" || {
        echo "FAIL: the backend suite did not pass on the test double"; fail=1; }
grep '^integration ' "$tmp/out/gpu-check-summary.txt" | grep -v ' rc 0 ' && {
        echo "FAIL: an integration suite failed on the test double"; fail=1; }
grep -Eq '^integration .*, [1-9][0-9]* skipped$' "$tmp/out/gpu-check-summary.txt" || {
        echo "FAIL: the harness skipped no case on the test double"; fail=1; }
# grep reads the whole listing: with pipefail, a grep -q that stops early
# would fail the pipeline by tar's SIGPIPE.
tar -tzf "$tmp/out/gpu-check-logs.tar.gz" | grep 'backend.log' > /dev/null || {
        echo "FAIL: the logs hold no backend.log"; fail=1; }
((fail)) || echo "PASS: dry run in $took s"
exit $fail
