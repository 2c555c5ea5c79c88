#!/usr/bin/env bash
# check-abi.sh - libcubeclient exports exactly the functions cube.h declares,
# each in a CUBE_ version node, under the soname libcubeclient.so.0.
#
#   tests/check-abi.sh LIBRARY HEADER CC...
#
# The header is preprocessed with CC (comments and macros gone) and every
# `cube_name(` in it is a declared function; the library's dynamic symbols
# come from nm -D. A declared function not exported, a symbol exported that
# the header does not declare, or one outside a version node fails.
set -u
lib=$1
header=$2
shift 2
fail=0
export LC_ALL=C

problem() {
        echo "check-abi: $*" >&2
        fail=1
}

declared=$("$@" -E -P -x c "$header" | grep -oE '\bcube_[a-z0-9_]+[[:space:]]*\(' |
           sed -E 's/[[:space:]]*\($//' | sort -u)
[ "$(wc -w <<<"$declared")" -gt 50 ] || problem "found too few declarations in $header"

# "ADDRESS TYPE NAME@@VERSION" for each defined dynamic symbol; the version
# nodes themselves are absolute symbols named after the node (with or without
# the version after them, as binutils' releases differ).
exported=""
while read -r _ type sym; do
        name=${sym%%@*}
        version=${sym#"$name"}
        version=${version#@@}
        version=${version#@}
        if [ "$type" = A ] && { [ -z "$version" ] || [ "$name" = "$version" ]; }; then
                [[ $name == CUBE_* ]] || problem "unexpected version node $name"
                continue
        fi
        [[ $version == CUBE_* ]] || problem "$name is exported outside a CUBE_ version node ('$sym')"
        exported+="$name"$'\n'
done < <(nm -D --defined-only "$lib")
exported=$(sort -u <<<"$exported" | sed '/^$/d')

while read -r name; do
        [ -n "$name" ] && problem "$name is exported but not declared in cube.h"
done < <(comm -13 <(echo "$declared") <(echo "$exported"))
while read -r name; do
        [ -n "$name" ] && problem "$name is declared in cube.h but not exported"
done < <(comm -23 <(echo "$declared") <(echo "$exported"))

soname=$(readelf -d "$lib" | sed -nE 's/.*\(SONAME\).*\[(.*)\].*/\1/p')
[ "$soname" = libcubeclient.so.0 ] || problem "the soname is '$soname', not libcubeclient.so.0"
exit $fail
