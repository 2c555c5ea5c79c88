#!/usr/bin/env bash
# setup.sh - install what cube needs on a Debian 12 machine, then build it.
#
#   tools/setup.sh [BUILD_DIR [MESON_OPTION...]]
#
# Installs the missing Debian packages (as root, through apt-get), configures
# BUILD_DIR (default: build) with warnings as errors, and builds.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config gcc libc6-dev libuv1-dev libmsgpack-dev
          libsystemd-dev check valgrind python3 g++ libgloo-dev iproute2
          python3-venv python3-pip python3-dev python3-setuptools python3-cffi python3-numpy
          python3-pytest pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers libseccomp-dev
          man-db groff-base clang libclang-rt-14-dev libclang-15-dev)
missing=()
for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
                missing+=("$p")
done
if ((${#missing[@]})); then
        echo "setup: installing ${missing[*]}"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
                "${missing[@]}" >/dev/null
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" -Dwerror=true "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
echo "setup: built in $build"
