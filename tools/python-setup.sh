#!/usr/bin/env bash
# python-setup.sh - the Python binding, installed into a virtual environment.
#
#   tools/python-setup.sh [BUILD_DIR]        (default: build; run tools/setup.sh first)
#
# Makes BUILD_DIR/python-venv (with --system-site-packages, so Debian's cffi,
# numpy and pytest are used and nothing is fetched from the network) and
# installs ./python into it, built against the libcubeclient of BUILD_DIR
# (CUBE_BUILD_DIR: its meson-uninstalled pkg-config file). Prints the
# environment's python.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
venv=$build/python-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
# setuptools keeps its own build tree in python/build: a stale one would keep an
# extension linked against another build directory.
rm -rf python/build
CUBE_BUILD_DIR=$build "$venv/bin/pip" install -q --no-build-isolation --no-deps --no-index \
        --force-reinstall ./python >&2
rm -rf python/build python/cubeclient.egg-info
echo "$venv/bin/python"
