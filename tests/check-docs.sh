#!/usr/bin/env bash
# check-docs.sh - the manual pages, the example configuration and the bash
# completion against the code they describe, so that neither can drift.
#
#   tests/check-docs.sh SOURCE_ROOT CHECK [CUBED]
#
# CHECK is one of:
#   render      every page renders with man -l and groff without a warning
#   config-keys every key of daemon/config.c's table is described in
#               cubed.conf(5) and listed in systemd/cubed.conf.example, both
#               saying whether a reload changes it as the table does
#   cubed       every long option of daemon/main.c is described in cubed(8)
#   readme      every option `CUBED --help` lists is a row of README's table
#               of options
#   uninstalled README's commands for building against the build tree (the
#               uninstalled .pc) build examples/vector_add.c, which then runs
#               against the build tree's CUBED
#   cubectl     every command of cubectl's usage and every long option is
#               described in cubectl(1), and every command is completed
#   example     CUBED --check-config accepts the example as it is, and with
#               every default it shows uncommented
#   defaults    each default the example shows is the value `cubectl config`
#               reports of a CUBED started with no configuration
# Prints each discrepancy and exits 1 when there is one.
set -u
src=$1
check=$2
cubed=${3:-}
cubectl_bin=${4:-}
fail=0
export LC_ALL=C.UTF-8

problem() {
        echo "check-docs: $*" >&2
        fail=1
}

# The lines of a roff page, with \- read as -.
page() {
        sed 's/\\-/-/g' "$src/man/$1"
}

render() {
        local p out
        for p in cubed.8 cubectl.1 cubed.conf.5; do
                out=$(MANROFFSEQ='' MANWIDTH=80 man --warnings -l "$src/man/$p" 2>&1 >/dev/null)
                [ -z "$out" ] || problem "man -l man/$p warns: $out"
                out=$(groff -man -ww -z "$src/man/$p" 2>&1)
                [ -z "$out" ] || problem "groff man/$p warns: $out"
                out=$(MANWIDTH=80 man -l "$src/man/$p" 2>/dev/null | grep -c .)
                [ "${out:-0}" -gt 20 ] || problem "man -l man/$p renders almost nothing"
        done
}

# "KEY true|false" for each entry of the option table: whether a reload
# changes it.
option_table() {
        sed -nE 's/^[[:space:]]*\{ "([a-z-]+)", K_[A-Z0-9]+,.*, (true|false) \},.*/\1 \2/p' \
                "$src/daemon/config.c"
}

# What cubed.conf(5) says of KEY's reload: the entry from its .BI line to
# the next .TP or .SS.
conf_reload() {
        page cubed.conf.5 | awk -v key="$1" '
                /^\.(TP|SS)/ { on = 0 }
                index($0, ".BI \"" key " = \"") == 1 { on = 1 }
                on && /^Reload: / { print; exit }'
}

config_keys() {
        local k reload n=0 line
        while read -r k reload; do
                n=$((n + 1))
                page cubed.conf.5 | grep -qE "^\.BI \"$k = \"" ||
                        problem "key '$k' is not described in man/cubed.conf.5"
                line=$(grep -E "^# $k( |$)" "$src/systemd/cubed.conf.example") ||
                        problem "key '$k' is not in systemd/cubed.conf.example"
                [ "$k" = instance ] && continue   # command line only
                if [ "$reload" = true ]; then
                        [[ $line != *"[restart]"* ]] ||
                                problem "the example marks '$k' [restart]; a reload changes it"
                        [ "$(conf_reload "$k")" = "Reload: takes effect at once." ] ||
                                problem "man/cubed.conf.5 does not say a reload changes '$k'"
                else
                        [[ $line == *"[restart]"* ]] ||
                                problem "the example does not mark '$k' [restart]"
                        [ "$(conf_reload "$k")" = "Reload: keeps its value until the next start." ] ||
                                problem "man/cubed.conf.5 does not say '$k' waits for a restart"
                fi
        done < <(option_table)
        [ "$n" -gt 30 ] || problem "found too few keys in daemon/config.c"
}

# The long options of a C file's getopt_long table.
long_options() {
        sed -nE 's/^[[:space:]]*\{ "([a-z-]+)", (required|no)_argument,.*/\1/p' "$1"
}

cubed_options() {
        local opts o
        opts=$(long_options "$src/daemon/main.c")
        [ "$(wc -w <<<"$opts")" -gt 30 ] || problem "found too few options in daemon/main.c"
        for o in $opts; do
                page cubed.8 | grep -qE "^\.BI? --$o( |$)" ||
                        problem "option '--$o' is not described in man/cubed.8"
        done
}

# The options `cubed --help` lists (each line's first word, when it is one)
# are rows of README's table, "| `--name ...` |", so that a newcomer reading
# README meets every limit the daemon enforces.
readme_options() {
        local opts o
        [ -x "$cubed" ] || { problem "no cubed to run"; return; }
        opts=$("$cubed" --help | sed -nE 's/^  (--[a-z][a-z-]*).*/\1/p' | sort -u)
        [ "$(wc -w <<<"$opts")" -gt 30 ] || problem "found too few options in cubed --help"
        for o in $opts; do
                grep -qE "^\| (\`[^\`]*\`, )*\`$o( [^\`]*)?\`(, | \|)" "$src/README.md" ||
                        problem "option '$o' of cubed --help is not in README's table of options"
        done
}

# README's block that builds against cubeclient-uninstalled, run as it is
# with the checkout's build directory for $PWD/build and vector_add.c for
# app.c; the program must then add its vectors through the daemon.
uninstalled() {
        local build dir block pid i out
        [ -x "$cubed" ] || { problem "no cubed to run"; return; }
        build=$(cd "$(dirname "$cubed")/.." && pwd)
        block=$(awk '/^```/ { if (on) { if (keep) { printf "%s", text; exit } on = 0; next }
                              on = 1; text = ""; keep = 0; next }
                     on { text = text $0 "\n"; if (/cubeclient-uninstalled/) keep = 1 }' \
                "$src/README.md")
        [ -n "$block" ] || { problem "README shows no build against cubeclient-uninstalled"; return; }
        dir=$(mktemp -d) || return
        cp "$src/examples/vector_add.c" "$dir/app.c"
        out=$(cd "$dir" && bash -euc "${block//\$PWD\/build/$build}" 2>&1) ||
                { problem "README's uninstalled build fails: $out"; rm -rf "$dir"; return; }
        "$cubed" --socket "$dir/s" --cache-dir "$dir/cache" >"$dir/log" 2>&1 &
        pid=$!
        for ((i = 0; i < 300; i++)); do
                [ -S "$dir/s" ] && break
                sleep 0.1
        done
        out=$(cd "$dir" && env -u LD_LIBRARY_PATH CUBE_SOCKET="$dir/s" ./a.out 2>&1) ||
                problem "the program README's uninstalled build made does not run: $out"
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rm -rf "$dir"
}

# The commands cubectl's usage lists: two spaces, then a name, from
# "Commands:" to "Options:".
cubectl_commands() {
        awk '/^"Commands:/ { on = 1; next } /^"Options:/ { on = 0 }
             on && match($0, /^"  [a-z][a-z-]*/) { print substr($0, 4, RLENGTH - 3) }' \
                "$src/tools/cubectl.c"
}

cubectl() {
        local cmds c o words
        cmds=$(cubectl_commands)
        [ "$(wc -w <<<"$cmds")" -gt 10 ] || problem "found too few commands in tools/cubectl.c"
        words=$(bash -c 'source "$1" && echo $_cubectl_commands' _ "$src/completions/cubectl")
        for c in $cmds; do
                page cubectl.1 | grep -qE "^\.B[IR]? \"?$c( |\"|$)" ||
                        problem "command '$c' is not described in man/cubectl.1"
                grep -qw -- "$c" <<<"$words" ||
                        problem "command '$c' is not completed by completions/cubectl"
        done
        for o in $(long_options "$src/tools/cubectl.c"); do
                page cubectl.1 | grep -qE "^\.BI? --$o( |$)" ||
                        problem "option '--$o' is not described in man/cubectl.1"
        done
}

example() {
        local dir out
        [ -x "$cubed" ] || { problem "no cubed to run: '$cubed'"; return; }
        dir=$(mktemp -d) || return
        out=$("$cubed" --check-config "$src/systemd/cubed.conf.example" 2>&1) ||
                problem "cubed --check-config refuses the example: $out"
        # Each `# key = value` line with a value, uncommented: the defaults
        # the example states are values cubed takes.
        sed -nE 's/^# ([a-z-]+ = [^ #]+).*/\1/p' "$src/systemd/cubed.conf.example" >"$dir/defaults.conf"
        [ "$(wc -l <"$dir/defaults.conf")" -gt 30 ] || problem "found too few defaults in the example"
        out=$("$cubed" --check-config "$dir/defaults.conf" 2>&1) ||
                problem "cubed --check-config refuses the example's defaults: $out"
        rm -rf "$dir"
}

# Starts CUBED on a socket of its own with no configuration, and compares
# each `# key = value` of the example with the value `cubectl --json config`
# reports, sizes read with their suffixes. The socket, the cache directory
# and the comm directory follow the instance and the socket, and the example
# shows them for cpu0; memory-limit 0 is the backend's own, 4G on cpu. The
# example configures the unit, so cubed runs as systemd starts it
# (INVOCATION_ID set): poison-policy's default follows how it was started.
defaults() {
        local dir pid i out r=0
        [ -x "$cubed" ] && [ -x "$cubectl_bin" ] || { problem "no cubed or cubectl to run"; return; }
        dir=$(mktemp -d) || return
        chmod 700 "$dir"
        INVOCATION_ID=check-docs "$cubed" --socket "$dir/cpu0.sock" --cache-dir "$dir/cache" \
                >"$dir/log" 2>&1 &
        pid=$!
        for ((i = 0; i < 300; i++)); do
                out=$("$cubectl_bin" --socket "$dir/cpu0.sock" --json config 2>/dev/null) && break
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
        done
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        if [ -z "$out" ]; then
                problem "cubed did not answer cubectl config: $(cat "$dir/log")"
                rm -rf "$dir"
                return
        fi
        python3 - "$src/systemd/cubed.conf.example" "$out" <<'PY' || r=1
import json, re, sys
running = {e["key"]: e["value"] for e in json.loads(sys.argv[2])}
derived = {"socket", "cache-dir", "comm-dir"}
mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
def value(v):
    m = re.fullmatch(r"(\d+)([KMGT])", v)
    return str(int(m.group(1)) * mult[m.group(2)]) if m else v
bad = 0
for line in open(sys.argv[1]):
    m = re.match(r"# ([a-z-]+) = ([^ #]+)", line)
    if not m or m.group(1) in derived:
        continue
    key, shown = m.groups()
    want = running.get(key)
    if key == "memory-limit" and want == "0":
        want = str(4 << 30)
    if want is None or value(shown) != want:
        print(f"check-docs: the example shows {key} = {shown}; cubed's default is {want}",
              file=sys.stderr)
        bad = 1
sys.exit(bad)
PY
        [ "$r" = 0 ] || fail=1
        rm -rf "$dir"
}

case $check in
render) render ;;
config-keys) config_keys ;;
cubed) cubed_options ;;
readme) readme_options ;;
uninstalled) uninstalled ;;
cubectl) cubectl ;;
example) example ;;
defaults) defaults ;;
*) echo "check-docs: unknown check '$check'" >&2; exit 2 ;;
esac
exit $fail
