#!/usr/bin/env bash
# check-docs.sh - the manual pages, the example configuration and the bash
# completion against the code they describe, so that neither can drift.
#
#   tests/check-docs.sh SOURCE_ROOT CHECK [CUBED]
#
# CHECK is one of:
#   render      every page renders with man -l and groff without a warning
#   config-keys every key of daemon/config.c's table is described in
#               cubed.conf(5) and listed in systemd/cubed.conf.example
#   cubed       every long option of daemon/main.c is described in cubed(8)
#   cubectl     every command of cubectl's usage and every long option is
#               described in cubectl(1), and every command is completed
#   example     CUBED --check-config accepts the example as it is, and with
#               every default it shows uncommented
# Prints each discrepancy and exits 1 when there is one.
set -u
src=$1
check=$2
cubed=${3:-}
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

config_keys() {
        local keys k
        keys=$(sed -nE 's/^[[:space:]]*\{ "([a-z-]+)", K_[A-Z0-9]+,.*/\1/p' "$src/daemon/config.c")
        [ "$(wc -w <<<"$keys")" -gt 30 ] || problem "found too few keys in daemon/config.c"
        for k in $keys; do
                page cubed.conf.5 | grep -qE "^\.BI \"$k = \"" ||
                        problem "key '$k' is not described in man/cubed.conf.5"
                grep -qE "^# $k( |$)" "$src/systemd/cubed.conf.example" ||
                        problem "key '$k' is not in systemd/cubed.conf.example"
        done
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

case $check in
render) render ;;
config-keys) config_keys ;;
cubed) cubed_options ;;
cubectl) cubectl ;;
example) example ;;
*) echo "check-docs: unknown check '$check'" >&2; exit 2 ;;
esac
exit $fail
