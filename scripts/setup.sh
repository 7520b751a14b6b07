#!/usr/bin/env bash
# Creates .venv/ at the repository root, installs the pinned Python dependencies and builds
# and installs the `cai` package (C++ core + nanobind extension) into it. Prints each step as
# it starts and how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
SETUP_START=$SECONDS

# step "what" command...: runs one step between a start line and a timing line.
step() {
  local what=$1 start=$SECONDS
  shift
  echo "setup: $what ..."
  "$@"
  echo "setup: $what: done in $((SECONDS - start)) s"
}

if [ ! -x .venv/bin/python ]; then
  step "creating .venv/ with $("$PYTHON" --version 2>&1)" "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
step "upgrading pip" "${PIP[@]}" --upgrade pip
# The build's and the tests' pins (requirements-dev.txt includes requirements.txt).
step "installing the pinned requirements (requirements-dev.txt)" "${PIP[@]}" -r requirements-dev.txt
# No build isolation: the pinned nanobind and scikit-build-core from requirements.txt build it,
# and build/python/ is kept between runs so that rebuilds are incremental.
step "building and installing cai (C++ core + extension, incremental in build/python/)" \
  "${PIP[@]}" --no-build-isolation .
echo "setup: ready in $((SECONDS - SETUP_START)) s: .venv/bin/python -m cai info"
