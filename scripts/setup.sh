#!/usr/bin/env bash
# Creates .venv/ at the repository root, installs the pinned Python dependencies and builds
# and installs the `cai` package (C++ core + nanobind extension) into it.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
# No build isolation: the pinned nanobind and scikit-build-core from requirements.txt build it,
# and build/python/ is kept between runs so that rebuilds are incremental.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation .
