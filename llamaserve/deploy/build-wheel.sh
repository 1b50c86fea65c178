#!/bin/sh
# Build the llamacore wheel (llama.cpp compiled in; extra CMake flags from $CMAKE_ARGS) into OUT.
# The Dockerfile's build stage runs this, and CI runs it unchanged (.ci/deploy).
# Usage: build-wheel.sh SRC OUT   (SRC: a source checkout, or a folder holding llamacore-*.tar.gz)
set -eu
src=${1:-/src}
out=${2:-/wheels}
if ! command -v cmake >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1 || ! command -v patch >/dev/null 2>&1 \
    || ! python3 -m venv --help >/dev/null 2>&1; then
  apt-get update
  apt-get install -y --no-install-recommends build-essential cmake patch python3 python3-pip python3-venv
fi
if [ -f "$src/setup.py" ]; then
  target=$src
else
  target=$(ls "$src"/llamacore-*.tar.gz | head -n 1)
fi
python3 -m venv /tmp/llamaserve-build-venv
/tmp/llamaserve-build-venv/bin/pip install --quiet --upgrade pip
/tmp/llamaserve-build-venv/bin/pip wheel --no-deps --wheel-dir "$out" "$target"
rm -rf /tmp/llamaserve-build-venv
ls "$out"/llamacore-*.whl
