#!/usr/bin/env bash
# check-completion.sh - completions/cubectl, sourced in bash, completes
# commands, options and socket paths.
#
#   tests/check-completion.sh SOURCE_ROOT
set -u
script=$1/completions/cubectl
fail=0
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
touch "$dir/cpu7.sock"

# Completes the words given (the last one the word under the cursor) and
# compares COMPREPLY, sorted, with the expected words.
expect() {
        local want=$1 got
        shift
        got=$(bash -c 'source "$1" || exit 1; shift
                       COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _cubectl
                       printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' _ "$script" "$@")
        if [ "${got% }" != "$want" ]; then
                echo "check-completion: '$*' completes to '${got% }', not '$want'" >&2
                fail=1
        fi
}

expect "status streams" cubectl st
expect "kill-session" cubectl --json kil
expect "--socket" cubectl --so
expect "--help --json --socket --version" cubectl --
expect "--timeout" cubectl drain --t
expect "--count --help --interval --json --socket --version" cubectl top --
expect "$dir/cpu7.sock" cubectl --socket "$dir/cp"
expect "bans" cubectl --socket "$dir/cpu7.sock" ba
expect "" cubectl status s
exit $fail
