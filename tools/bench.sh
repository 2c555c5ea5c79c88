#!/usr/bin/env bash
# bench.sh - the performance table: cube-bench against a fresh cubed on a
# temporary socket, under each CPU placement.
#
#   tools/bench.sh [BUILD_DIR] [cube-bench options...]     e.g. --runs 7, --smoke
#   tools/bench.sh [BUILD_DIR] --scheduling [--smoke]
#
# --scheduling prints the scheduling table instead, unpinned: a daemon with
# --shares "default weight=9 class=latency" (the sessions lower themselves to
# the weights and classes each row needs) for cube-bench --only scheduling,
# then one with --shares "default cap=30 cap-alone=yes" for --only cap. With
# BASE_BUILD set to another build's directory (the executor before shares),
# that build's cubed runs --only floods last: the latency figure as it was.
#
# Placements, each with a daemon of its own and an empty kernel cache of its
# own (so "compiling" figures really compile):
#   same vCPU        daemon and client both on CPU 0 (taskset -c 0)
#   different vCPUs  daemon on CPU 1, client on CPU 0
#   unpinned         neither pinned
# Setting CUBED_CPUS and/or BENCH_CPUS (taskset CPU lists) runs that one
# placement instead. Under each, cube-bench prints the table; then the daemon
# is restarted on the same --cache-dir and cube-bench --after-restart times
# the first launch of kernels the first run compiled, now loaded from disk.
# With build/python-venv (tools/python-setup.sh), tools/bench-python.py then
# adds the Python binding's rows (launches and a 64 MiB round trip from
# Python beside the same from C) to each placement's table.
# When redis-server and redis-benchmark are installed, PING_INLINE with 50
# clients on a Unix socket, under the same placement, is the baseline of the
# many-clients figure; otherwise cube-bench uses its own.
# The collective figures need a second daemon: each placement starts one more
# on $dir/p, pinned like the first, and the two all_reduce through a minted
# group id; their baseline is Gloo's own allreduce (build/tools/bench-gloo)
# between two processes on the same CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

dir=$(mktemp -d /tmp/cube-bench-XXXXXX)
daemon_args=()
unchecked_arg="--unchecked-uids=$(id -u)"
pid=
peer=
cleanup() {
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
        [ -n "$peer" ] && kill "$peer" 2>/dev/null || true
        rm -rf "$dir"
}
trap cleanup EXIT

# start_daemon CACHE_DIR PIN...: cubed on $dir/s; sets pid.
start_daemon() {
        start_cubed s "$@"
        pid=$started
}

# The front end's row runs cube-device --check itself.
export CUBE_DEVICE_BIN=${CUBE_DEVICE_BIN:-$build/daemon/cube-device}

# start_peer CACHE_DIR PIN...: the second daemon, on $dir/p; sets peer.
start_peer() {
        start_cubed p "$@"
        peer=$started
}

# start_cubed NAME CACHE_DIR PIN...: cubed on $dir/NAME; sets started.
start_cubed() {
        local name=$1 cache=$2
        shift 2
        rm -f "$dir/$name"
        # This user may launch unchecked (the "checked" figure times both);
        # a base build from before check modes is started without it.
        "$@" "$build/daemon/cubed" --socket "$dir/$name" --cache-dir "$cache" \
                "${daemon_args[@]}" $unchecked_arg 2>>"$dir/log" &
        started=$!
        for _ in $(seq 200); do
                [ -S "$dir/$name" ] && return 0
                sleep 0.05
        done
        echo "bench.sh: cubed did not start" >&2
        cat "$dir/log" >&2
        exit 1
}

stop_daemon() {
        kill -TERM "$pid"
        wait "$pid"
        pid=
        if [ -n "$peer" ]; then
                kill -TERM "$peer"
                wait "$peer"
                peer=
        fi
}

# redis_ops PIN_SERVER PIN_CLIENT: PING_INLINE requests per second, or nothing.
redis_ops() {
        command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || return 0
        local server=($1) client=($2) rpid ops
        "${server[@]}" redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" \
                --appendonly no >/dev/null 2>&1 &
        rpid=$!
        for _ in $(seq 100); do
                [ -S "$dir/redis.sock" ] && break
                sleep 0.05
        done
        ops=$("${client[@]}" redis-benchmark -s "$dir/redis.sock" -t PING_INLINE -c 50 \
                -n 200000 --csv | awk -F'"' '/PING_INLINE/ { print $4 }')
        kill "$rpid"
        wait "$rpid" 2>/dev/null || true
        echo "$ops"
}

# placement NAME DAEMON_CPUS CLIENT_CPUS (empty: unpinned), then cube-bench options.
placement() {
        local name=$1 dcpus=$2 bcpus=$3 pin_d=() pin_b=() tag redis extra=() with_peer=1
        shift 3
        [ -n "$dcpus" ] && pin_d=(taskset -c "$dcpus")
        [ -n "$bcpus" ] && pin_b=(taskset -c "$bcpus")
        echo
        echo "== placement: $name (daemon: ${pin_d[*]:-unpinned}; client: ${pin_b[*]:-unpinned})"
        # redis-benchmark is the baseline of the many-clients figure only, and
        # a smoke run has no use for it.
        redis=
        case " $* " in
        *" --smoke "*) ;;
        *" --only "*) [[ " $* " == *" --only clients "* ]] && redis=$(redis_ops "${pin_d[*]}" "${pin_b[*]}") ;;
        *) redis=$(redis_ops "${pin_d[*]}" "${pin_b[*]}") ;;
        esac
        if [ -n "$redis" ]; then
                extra=(--redis-ops "$redis")
        fi
        # Only the collective figures use the second daemon.
        case " $* " in *" --only "*) [[ " $* " == *" --only collectives "* ]] || with_peer= ;; esac
        tag="restart-$$-${name// /-}"
        start_daemon "$dir/cache-${name// /-}" "${pin_d[@]}"
        if [ -n "$with_peer" ]; then
                start_peer "$dir/cache-peer-${name// /-}" "${pin_d[@]}"
                extra+=(--peer-socket "$dir/p")
        fi
        "${pin_b[@]}" "$build/tools/cube-bench" --socket "$dir/s" --daemon-pid "$pid" \
                --restart-tag "$tag" "${extra[@]}" "$@"
        # The Python binding beside C, when tools/python-setup.sh installed it.
        if [ -x "$build/python-venv/bin/python" ] && [[ " $* " != *" --only "* ]]; then
                local pyargs=()
                [[ " $* " == *" --smoke "* ]] && pyargs=(--smoke)
                "${pin_b[@]}" "$build/python-venv/bin/python" tools/bench-python.py \
                        --socket "$dir/s" "${pyargs[@]}"
        fi
        stop_daemon
        # The restart figure needs the kernel the "first" figure cached.
        case " $* " in *" --only "*) [[ " $* " == *" --only first "* ]] || return 0 ;; esac
        start_daemon "$dir/cache-${name// /-}" "${pin_d[@]}"
        "${pin_b[@]}" "$build/tools/cube-bench" --socket "$dir/s" --after-restart "$tag" "$@"
        stop_daemon
}

echo "cube-bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs," \
        "$(lscpu | sed -n 's/^Model name: *//p' | head -1), Linux $(uname -r)"
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
        echo "redis-server/redis-benchmark: not installed"
if [ "${1:-}" = --scheduling ]; then
        shift
        echo
        echo "== scheduling (unpinned)"
        daemon_args=(--shares "default weight=9 class=latency")
        start_daemon "$dir/cache-scheduling"
        "$build/tools/cube-bench" --socket "$dir/s" --daemon-pid "$pid" --only scheduling "$@"
        stop_daemon
        daemon_args=(--shares "default cap=30 cap-alone=yes")
        start_daemon "$dir/cache-scheduling"
        "$build/tools/cube-bench" --socket "$dir/s" --daemon-pid "$pid" --only cap "$@" |
                sed -n '/^| cap/p'
        stop_daemon
        if [ -n "${BASE_BUILD:-}" ]; then
                daemon_args=()
                unchecked_arg=""
                build_now=$build
                build=$BASE_BUILD
                start_daemon "$dir/cache-base"
                build=$build_now
                "$build/tools/cube-bench" --socket "$dir/s" --daemon-pid "$pid" --only floods \
                        "$@" | sed -n '/^| launch/s/^| /| the earlier build: /p'
                stop_daemon
        fi
elif [ -n "${CUBED_CPUS:-}${BENCH_CPUS:-}" ]; then
        placement "custom" "${CUBED_CPUS:-}" "${BENCH_CPUS:-}" "$@"
else
        placement "same vCPU" 0 0 "$@"
        if [ "$(nproc)" -ge 2 ]; then
                placement "different vCPUs" 1 0 "$@"
        else
                echo "(one CPU: no different-vCPU placement)"
        fi
        placement "unpinned" "" "" "$@"
fi
