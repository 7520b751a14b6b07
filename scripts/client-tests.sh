#!/usr/bin/env bash
# NVIDIA's driver-API clients over cai's simulated driver, with no GPU (docs/simulator.md,
# "Driver-API clients"): numba-cuda's own tests (numba.cuda.tests.cudadrv, and its cudapy CUDA
# Array Interface, IPC and stream-API tests) and cai's interop tests with numba-cuda and
# cuda.core (tests/clients). LD_LIBRARY_PATH names the simulated driver's folder, so numba-cuda,
# cuda.core (through cuda-bindings) and cai load the same libcuda.so.1.
#
#   scripts/client-tests.sh                        # both parts
#   CLIENT_TESTS=numba scripts/client-tests.sh     # one part: numba | interop
#
# The clients live in .venv-clients/ (requirements-clients.txt, pinned), apart from .venv/; cai
# goes there as a wheel built by .venv/ (run scripts/setup.sh first). numba-cuda's tests that
# cannot pass on the simulator are listed with their reason in
# tests/clients/numba_support/numba_expected_failures.txt, as strict expected failures: one that
# starts passing fails the run, so the list stays exact.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${CLIENTS_VENV:-$ROOT/.venv-clients}
PARTS=${CLIENT_TESTS:-numba interop}
PYTHON=${PYTHON:-python3}
START=$SECONDS

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-clients.txt

# cai, built by the main venv (incremental in build/python/), installed without its dependencies.
rm -rf build/client-wheel
.venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-build-isolation \
  --no-deps -w build/client-wheel .
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --force-reinstall build/client-wheel/cai_interop-*.whl

SIM_DIR=$("$VENV/bin/python" -m cai --sim-driver-dir)
echo "client-tests: the simulated driver: $SIM_DIR/libcuda.so.1"
export LD_LIBRARY_PATH="$SIM_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The clients' own switches that would change what runs: none set (numba's defaults).
unset CAI_BACKEND NUMBA_ENABLE_CUDASIM CUDA_VISIBLE_DEVICES

status=0
for part in $PARTS; do
  case $part in
    numba)
      # Run outside the repository, so that its pytest configuration stays out. The wheel keeps
      # numba.cuda in numba_cuda/numba/cuda, reached through an import hook: with numba_cuda/
      # on the path and namespace packages considered, pytest names the test modules
      # numba.cuda.tests.*, which the spawned children of the IPC and init tests can import.
      numba_root=$("$VENV/bin/python" -c \
        'import numba_cuda, os; print(os.path.dirname(numba_cuda.__file__))')
      (cd build && PYTHONPATH="$ROOT/tests/clients/numba_support:$numba_root" \
        "$VENV/bin/python" -m pytest -q -p cai_numba_plugin -p no:cacheprovider \
        --import-mode=importlib -o consider_namespace_packages=true \
        -o junit_family=xunit2 --junitxml="$ROOT/build/client-tests-numba.xml" \
        --pyargs numba.cuda.tests.cudadrv numba.cuda.tests.cudapy.test_cuda_array_interface \
        numba.cuda.tests.cudapy.test_ipc numba.cuda.tests.cudapy.test_stream_api) || status=1
      ;;
    interop)
      "$VENV/bin/python" -m pytest -q -p no:cacheprovider --rootdir tests/clients \
        tests/clients || status=1
      ;;
    *)
      echo "client-tests: unknown part '$part' (numba, interop)" >&2
      exit 2
      ;;
  esac
done
echo "client-tests: done in $((SECONDS - START)) s"
exit $status
