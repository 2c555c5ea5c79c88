#!/usr/bin/env bash
# test.sh - the whole test suite, in the normal build and under ASan/UBSan.
#
# Sets up and builds (tools/setup.sh), runs every meson test in build/, then
# builds build-asan/ with AddressSanitizer and UndefinedBehaviorSanitizer and
# runs them all again, then the CUDA backend's suite and the integration
# suites against cubed on the driver's test double (hostile's address-space
# counts aside) under ThreadSanitizer (build-tsan/, only what those need),
# then runs every fuzz target under libFuzzer for a
# bounded time (tests/fuzz/run.sh: all at once, $CUBE_FUZZ_SECONDS each,
# default 60). Then installs the Python binding into build/python-venv
# (tools/python-setup.sh) and runs its pytest suite against the cubed of
# build/ (the ASan run covers the C suites only). Ends with one line summing
# every Check test case of both runs, every fuzz target and every pytest
# case: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build || exit 1
tools/setup.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false || exit 1

rc=0
echo "== tests (build)"
meson test -C build --print-errorlogs --no-rebuild || rc=1
echo "== tests under ASan/UBSan (build-asan)"
CUBE_TEST_NO_VALGRIND=1 CUBE_TEST_TIMEOUT_MULT=3 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
        meson test -C build-asan --print-errorlogs --no-rebuild --timeout-multiplier 3 || rc=1

echo "== the CUDA backend on its test double under TSan (build-tsan)"
tsan_log=""
if [ -f build/tests/test-cuda-driver ]; then
        [ -f build-tsan/build.ninja ] ||
                meson setup build-tsan -Dwerror=true -Db_sanitize=thread -Db_lundef=false >/dev/null
        if ninja -C build-tsan tests/test-cuda-driver tests/cuda-double/libcuda.so.1 \
                daemon/cubed daemon/cube-device tools/cubectl tests/test-daemon tests/test-memory \
                tests/test-failures tests/test-operations tests/test-sharing tests/test-graphs \
                tests/test-protocol-doc tests/test-kernels >/dev/null; then
                CUBE_TEST_NO_VALGRIND=1 CUBE_TEST_TIMEOUT_MULT=10 \
                TSAN_OPTIONS=suppressions=$PWD/tests/tsan.supp meson test -C build-tsan \
                        --print-errorlogs --no-rebuild --timeout-multiplier 3 \
                        cuda-driver daemon-on-cuda-double memory-on-cuda-double \
                        failures-on-cuda-double operations-on-cuda-double \
                        sharing-on-cuda-double graphs-on-cuda-double \
                        protocol-doc-on-cuda-double kernels-on-cuda-double || rc=1
                tsan_log=build-tsan/meson-logs/testlog.json
        else
                rc=1
        fi
fi

echo "== fuzz targets under libFuzzer (build-fuzz)"
rm -f build-fuzz/fuzz.xml
tests/fuzz/run.sh || rc=1

echo "== Python binding (pytest, build)"
rm -f build/pytest.xml
if py=$(tools/python-setup.sh build); then
        CUBE_BUILD_DIR=$PWD/build CUBE_TEST_TIMEOUT_MULT=${CUBE_TEST_TIMEOUT_MULT:-1} \
                "$py" -m pytest -q -p no:cacheprovider --junitxml=build/pytest.xml python/tests || rc=1
else
        echo "test: the Python binding did not install" >&2
        rc=1
fi

# A missing build/pytest.xml or build-fuzz/fuzz.xml counts as a failure.
python3 tools/count-tests.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
        $tsan_log build-fuzz/fuzz.xml build/pytest.xml || rc=1
exit $rc
