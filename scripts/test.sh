#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the C++ suites through ctest (under ASan+UBSan,
# in the sanitizer step), the external CMake consumers, a bounded fuzz run, the Python suite
# through pytest, and the sanitizer runs (scripts/sanitize.sh). Each step prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-2}

# section NAME: ends the previous section with its time and starts the next one.
SECTION_START=$SECONDS
TOTAL_START=$SECONDS
section() {
  [ -n "${SECTION:-}" ] && echo "== $SECTION: $((SECONDS - SECTION_START)) s"
  SECTION=$1 SECTION_START=$SECONDS
  [ -n "$1" ] && echo "== $1"
  return 0
}

section "setup"
scripts/setup.sh
mkdir -p build

# The C++ suites run once, under ASan+UBSan (the sanitizer step), unless SANITIZE=0 (a quick
# local run) runs them here without sanitizers. The sanitizer trees compile at low priority from
# here on, on what the steps before the sanitizer step leave idle (most of pytest runs on one
# core). A failing step stops them too.
# COVERAGE=1: the ASan tree counts lines, and the coverage step checks src/ and src/device/backend/.
SANITIZE_ENV=(SANITIZE_BUILD=build/sanitize PYTHON="$ROOT/.venv/bin/python" JOBS="$JOBS"
  COVERAGE=1)
CPP_TESTS=OFF
if [ "${SANITIZE:-1}" != "0" ]; then
  # A process group of its own (set -m), not a session of its own: the kernel's autogroups
  # would give a new session an equal share of the CPU whatever its nice value.
  set -m
  env "${SANITIZE_ENV[@]}" nice -n 15 scripts/sanitize.sh build >build/sanitize-build.log 2>&1 &
  SANITIZE_BUILD_PID=$!
  set +m
  trap 'kill -- -$SANITIZE_BUILD_PID 2>/dev/null || true' EXIT
else
  CPP_TESTS=ON
fi

section "C++ build (_cai by a compiler whose LTO does not work; the C++ suites if SANITIZE=0)"
# The compiler is g++ behind a wrapper that fails whenever -flto is on its command line, as a
# g++ without its LTO plugin does: configuring must find that out and build _cai without LTO.
# The test executables build at -O0 (CAI_TEST_CXX_FLAGS; the layers stay optimized).
cmake -S . -B build/cpp -G Ninja -DCAI_BUILD_TESTS=$CPP_TESTS -DCAI_BUILD_BENCH=ON \
  -DCAI_TEST_CXX_FLAGS=-O0 -DCAI_BUILD_PYTHON=ON \
  -DCMAKE_CXX_COMPILER="$ROOT/tests/cmake/no_lto/g++-without-lto" \
  -DPython_EXECUTABLE="$ROOT/.venv/bin/python" -DCMAKE_INSTALL_PREFIX="$ROOT/build/install" \
  >build/cpp-configure.log 2>&1 || { cat build/cpp-configure.log; exit 1; }
grep "cai: _cai is built without link-time" build/cpp-configure.log
cmake --build build/cpp -j "$JOBS"
if [ "$CPP_TESTS" = ON ]; then
  ctest --test-dir build/cpp --output-on-failure -j "$JOBS"
fi

section "install + find_package(cai) from an external project"
cmake --install build/cpp >/dev/null
cmake -S tests/cmake/find_package -B build/find_package -G Ninja \
  -DCMAKE_PREFIX_PATH="$ROOT/build/install" >/dev/null
cmake --build build/find_package
ctest --test-dir build/find_package --output-on-failure

section "extension modules, built only through the pip-installed package (python -m cai --cmake-dir)"
CAI_CMAKE_DIR=$(.venv/bin/python -m cai --cmake-dir)
# As examples/add_extension/CMakeLists.txt says to, with a relative interpreter path.
cmake -S examples/add_extension -B build/add_extension -G Ninja \
  -Dcai_DIR="$CAI_CMAKE_DIR" -DPython_EXECUTABLE=.venv/bin/python >/dev/null
cmake --build build/add_extension -j "$JOBS"
cmake -S tests/ext -B build/ext -G Ninja \
  -Dcai_DIR="$CAI_CMAKE_DIR" -DPython_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build/ext -j "$JOBS"
if command -v clang++ >/dev/null 2>&1; then
  # The caster probe again, by another compiler than cai._cai's: only the C API crosses.
  cmake -S tests/ext -B build/ext-clang -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCAI_PROBE_SUFFIX=_clang -Dcai_DIR="$CAI_CMAKE_DIR" \
    -DPython_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
  cmake --build build/ext-clang -j "$JOBS"
fi
cmake -S bench/caster_ext -B build/bench_caster -G Ninja \
  -Dcai_DIR="$CAI_CMAKE_DIR" -DPython_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build/bench_caster -j "$JOBS"
# The floors of bench/interop.py's rows: a plain C module, no cai (bench/floor_ext).
cmake -S bench/floor_ext -B build/bench_floor -G Ninja \
  -DPython_EXECUTABLE="$ROOT/.venv/bin/python" >/dev/null
cmake --build build/bench_floor -j "$JOBS"

if command -v clang++ >/dev/null 2>&1; then
  section "fuzzers (bounded)"
  CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCAI_BUILD_FUZZERS=ON -DCAI_BUILD_TESTS=OFF \
    -DCAI_INSTALL=OFF >/dev/null
  targets=$(ls tests/fuzz/fuzz_*.cpp | sed 's|tests/fuzz/fuzz_\(.*\)\.cpp|cai_fuzz_\1|')
  cmake --build build/fuzz -j "$JOBS" --target $targets
  # The targets run at the same time, one core each; a crash fails the run after their logs.
  fuzz_pids=()
  for f in build/fuzz/tests/fuzz/cai_fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    mkdir -p "build/fuzz/corpus/$name"
    "$f" -max_total_time="${FUZZ_SECONDS:-30}" -timeout=5 "build/fuzz/corpus/$name" \
      $( [ -d "tests/fuzz/corpus/$name" ] && echo "tests/fuzz/corpus/$name" ) \
      >"build/fuzz/$name.log" 2>&1 &
    fuzz_pids+=("$!:$name")
  done
  fuzz_failed=0
  for entry in "${fuzz_pids[@]}"; do
    pid=${entry%%:*} name=${entry#*:}
    rc=0
    wait "$pid" || rc=$?
    echo "$name (exit $rc):"
    tail -n 3 "build/fuzz/$name.log"
    [ $rc -eq 0 ] || fuzz_failed=1
  done
  [ $fuzz_failed -eq 0 ] || { echo "a fuzz target failed (logs in build/fuzz/)"; exit 1; }
fi

section "pytest"
.venv/bin/python -m pytest -q tests/python 2>&1 | tee build/pytest.log
# nanobind lists the instances still alive after the interpreter's cleanup: a reference that
# cai (or a test) never gave back. It prints and exits 0, so the step looks for it.
if grep -q "^nanobind: leaked" build/pytest.log; then
  echo "pytest: nanobind reported leaked instances at exit (build/pytest.log)"
  exit 1
fi

# NVIDIA's driver-API clients over the simulated driver: numba-cuda's own tests and cai's
# interop tests with numba-cuda and cuda.core (docs/simulator.md). CLIENTS=0 skips them.
if [ "${CLIENTS:-1}" != "0" ]; then
  section "driver-API clients over the simulated driver (scripts/client-tests.sh)"
  scripts/client-tests.sh
fi

# Sanitizers (docs/reliability.md): the C++ suites (ctest) and the whole Python suite under
# ASan+UBSan; TSan on the simulator and the all-layers thread test. SANITIZE=0 skips them (a
# quick local run).
if [ "${SANITIZE:-1}" != "0" ]; then
  section "sanitizers (scripts/sanitize.sh; logs in build/sanitize/logs)"
  # Their builds began after setup; a build failure is reported by the steps themselves.
  wait "$SANITIZE_BUILD_PID" || true
  trap - EXIT
  tail -n 2 build/sanitize-build.log
  env "${SANITIZE_ENV[@]}" scripts/sanitize.sh
fi
section ""
echo "== scripts/test.sh: every step passed in $((SECONDS - TOTAL_START)) s"
