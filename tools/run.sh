#!/usr/bin/env bash
# run.sh - cube's main job on the CPU backend, end to end.
#
# Sets up and builds (tools/setup.sh), starts cubed on a temporary socket,
# runs the example client against it, shows `cubectl status`, and stops the
# daemon with SIGTERM, which must exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build

dir=$(mktemp -d /tmp/cube-run-XXXXXX)
sock=$dir/cube.sock
build/daemon/cubed --socket "$sock" --cache-dir "$dir/cache" 2>"$dir/cubed.log" &
pid=$!
cleanup() {
        kill "$pid" 2>/dev/null || true
        rm -rf "$dir"
}
trap cleanup EXIT

for _ in $(seq 100); do
        [ -S "$sock" ] && break
        sleep 0.05
done

echo "== example: write a buffer, read it back, compare"
build/examples/roundtrip "$sock"
echo "== example: a kernel adds two vectors of a million floats, checked against the host"
build/examples/vector_add "$sock"
echo "== cubectl status"
build/tools/cubectl --socket "$sock" status
echo "== cubectl kernels"
build/tools/cubectl --socket "$sock" kernels

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
trap - EXIT
if [ "$status" -ne 0 ] || [ -e "$sock" ]; then
        echo "run: cubed did not stop cleanly (exit $status)" >&2
        cat "$dir/cubed.log" >&2
        rm -rf "$dir"
        exit 1
fi
rm -rf "$dir"
echo "== cubed stopped cleanly"
