#!/usr/bin/env bash
# bench-ab.sh - one cube-bench figure for two builds, interleaved, under one
# CPU placement: what a change costs, with the noise of the machine shared.
#
#   tools/bench-ab.sh BUILD_A BUILD_B FIGURE [ROUNDS]     e.g. ../old/build build sync 3
#
# Each round starts a fresh cubed of A, runs cube-bench --only FIGURE against
# it, then the same for B. The daemon runs on CPU 1 and cube-bench on CPU 0
# (CUBED_CPUS and BENCH_CPUS override). Prints each run's table row, tagged.
set -euo pipefail
a=$1 b=$2 figure=$3 rounds=${4:-3}
dcpus=${CUBED_CPUS:-1} bcpus=${BENCH_CPUS:-0}
dir=$(mktemp -d /tmp/cube-ab-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

run() {
        local build=$1 tag=$2
        rm -f "$dir/s"
        taskset -c "$dcpus" "$build/daemon/cubed" --socket "$dir/s" --cache-dir "$dir/cache-$tag" \
                2>>"$dir/log" &
        pid=$!
        for _ in $(seq 200); do [ -S "$dir/s" ] && break; sleep 0.05; done
        taskset -c "$bcpus" "$build/tools/cube-bench" --socket "$dir/s" --daemon-pid "$pid" \
                --only "$figure" | grep '^| ' | grep -v '^| figure\|^|---' | sed "s/^/$tag /"
        kill -TERM "$pid"
        wait "$pid" || true
        pid=
}

for r in $(seq "$rounds"); do
        run "$a" A
        run "$b" B
done
