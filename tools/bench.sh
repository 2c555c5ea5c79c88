#!/usr/bin/env bash
# bench.sh - run cube-bench against a fresh cubed on a temporary socket.
#
#   tools/bench.sh [BUILD_DIR] [cube-bench options...]
#
# The daemon gets an empty kernel cache of its own, so "compiling" figures
# really compile. Placement: set CUBED_CPUS / BENCH_CPUS to a taskset CPU list
# to pin the daemon (and its kernel pool) or the client.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

dir=$(mktemp -d /tmp/cube-bench-XXXXXX)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
pin_daemon=()
pin_bench=()
[ -n "${CUBED_CPUS:-}" ] && pin_daemon=(taskset -c "$CUBED_CPUS")
[ -n "${BENCH_CPUS:-}" ] && pin_bench=(taskset -c "$BENCH_CPUS")
"${pin_daemon[@]}" "$build/daemon/cubed" --socket "$dir/s" --cache-dir "$dir/cache" 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do
        [ -S "$dir/s" ] && break
        sleep 0.05
done
"${pin_bench[@]}" "$build/tools/cube-bench" --socket "$dir/s" "$@"
kill -TERM "$pid"
wait "$pid"
