#!/usr/bin/env bash
# test.sh - the whole test suite, in the normal build and under ASan/UBSan.
#
# Sets up and builds (tools/setup.sh), runs every meson test in build/, then
# builds build-asan/ with AddressSanitizer and UndefinedBehaviorSanitizer and
# runs them all again. Ends with one line summing every Check test case of
# both runs: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build || exit 1
tools/setup.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false || exit 1

rc=0
echo "== tests (build)"
meson test -C build --print-errorlogs --no-rebuild || rc=1
echo "== tests under ASan/UBSan (build-asan)"
CUBE_TEST_NO_VALGRIND=1 CUBE_TEST_TIMEOUT_MULT=3 \
        meson test -C build-asan --print-errorlogs --no-rebuild --timeout-multiplier 3 || rc=1

python3 tools/count-tests.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json ||
        rc=1
exit $rc
