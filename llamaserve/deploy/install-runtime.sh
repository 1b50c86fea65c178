#!/bin/sh
# Install the wheel built by build-wheel.sh (with the server's dependencies) into a venv, and, as
# root, an unprivileged user to run it. The Dockerfile's run stage runs this; CI runs it unchanged
# with PREFIX in a temporary folder and CREATE_USER=0 (.ci/deploy).
# Usage: install-runtime.sh WHEELS
set -eu
wheels=${1:-/wheels}
prefix=${PREFIX:-/opt/llamaserve}
if ! python3 -m venv --help >/dev/null 2>&1; then         # CUDA runtime images have no Python
  apt-get update
  apt-get install -y --no-install-recommends python3 python3-venv
  rm -rf /var/lib/apt/lists/*
fi
python3 -m venv "$prefix"
"$prefix/bin/pip" install --quiet --no-cache-dir "$(ls "$wheels"/llamacore-*.whl | head -n 1)[server]"
"$prefix/bin/llamaserve" --version
if [ "${CREATE_USER:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then
  useradd --system --uid 1000 --create-home --home-dir /home/llamaserve --shell /usr/sbin/nologin llamaserve
  mkdir -p /etc/llamaserve /models
fi
