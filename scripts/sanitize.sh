#!/usr/bin/env bash
# Sanitizer runs (docs/reliability.md):
#   asan-cpp     ASan+UBSan build of every layer and the C++ tests, run through ctest (the
#                all-layers thread test cai_test_threads among them). LeakSanitizer on.
#   asan-python  the Python suite (tests/python) against the same ASan+UBSan build of _cai:
#                the ASan runtime is LD_PRELOADed into the venv's Python, PYTHONMALLOC=malloc
#                so that ASan sees Python objects too, leak detection off (CPython keeps
#                memory until exit by design).
#   tsan         ThreadSanitizer build of the simulator/device tests (cai_test_device) and of
#                the all-layers thread test (cai_test_threads), run directly.
#   coverage     with COVERAGE=1 (the ASan tree is then built with --coverage): line coverage
#                of src/ by what asan-cpp and asan-python ran (gcovr; a line counts once, over
#                every object and template copy that has it), failing when src/device/backend/
#                is below COVERAGE_MIN_CUDA percent or src/ below COVERAGE_MIN percent. The
#                report: $SANITIZE_BUILD/logs/coverage.txt. Processes that end with _exit
#                (forked test children, os._exit) write their counts too: asan-python
#                preloads a shim whose _exit calls __gcov_dump first.
# The layers build at -O1 and the test executables at -O0 (CAI_TEST_CXX_FLAGS): the test files
# are most of the compile time and gain nothing from optimization.
#
#   build        only the two builds of the steps above (scripts/test.sh runs it while pytest
#                runs, so that the steps after pytest find their trees built).
#
# Usage: scripts/sanitize.sh [step...]   (default: asan-cpp asan-python tsan). Environment:
#   JOBS (2), SANITIZE_BUILD (build-sanitize), PYTHON (.venv/bin/python), CXX (g++),
#   SANITIZE_PYTEST (what asan-python runs: pytest paths and options, default tests/python,
#   which CI runs), PYTEST_ARGS (extra pytest arguments),
#   SANITIZE_KEEP_GOING=1 (do not stop a step's tests at the first sanitizer report),
#   COVERAGE=1 (the ASan tree counts lines; adds the coverage step), COVERAGE_MIN (src/, 90),
#   COVERAGE_MIN_CUDA (src/device/backend/, 96; measured 97.0, docs/cuda-backend.md).
# ccache is used when installed (CMAKE_CXX_COMPILER_LAUNCHER, unless already set).
# Logs go to $SANITIZE_BUILD/logs; a summary is printed at the end. Exit status: 0 when every
# step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-2}
BUILD=${SANITIZE_BUILD:-build-sanitize}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PYTHON:-$ROOT/.venv/bin/python}
export CXX=${CXX:-g++}
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
fi
LOGS=$BUILD/logs
mkdir -p "$LOGS"
STEPS=("$@")
if [ ${#STEPS[@]} -eq 0 ]; then
  STEPS=(asan-cpp asan-python tsan)
  [ "${COVERAGE:-0}" = 1 ] && STEPS+=(coverage)
fi

SUMMARY=()
FAILED=0
note() { SUMMARY+=("$1"); echo "== $1"; }

# report STEP RC LOG RESULTS REPORT_PATTERN: one summary line for a step that ran its tests.
report() {
  local step=$1 rc=$2 log=$3 results=$4 reports
  reports=$(grep -cE "$5" "$log")
  if [ "$rc" -eq 0 ]; then
    note "$step: PASS ($results; sanitizer reports: $reports)"
  else
    note "$step: FAIL (rc $rc; $results; sanitizer reports: $reports; see $log)"; FAILED=1
  fi
}

# -g1: line tables for the reports' stacks, no variable info (a third less compile time).
COMMON_FLAGS="-g1 -O1 -fno-omit-frame-pointer"
ASAN_FLAGS="$COMMON_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined"
# Line counts of the ASan tree, for the coverage step (the same runs, no third build).
# Atomic counters: code that threads run at once without a lock (a per-thread cache) otherwise
# loses increments, and gcov then derives negative branch counts that gcovr refuses.
[ "${COVERAGE:-0}" = 1 ] && ASAN_FLAGS="$ASAN_FLAGS --coverage -fprofile-update=atomic"
TSAN_FLAGS="$COMMON_FLAGS -fsanitize=thread"

# configure_and_build DIR FLAGS "TARGET..." [cmake args...]: a sanitized tree of the project.
configure_and_build() {
  local dir=$1 flags=$2 targets=$3
  shift 3
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
    -DCMAKE_MODULE_LINKER_FLAGS="$flags" \
    -DCAI_BUILD_TESTS=ON -DCAI_TEST_CXX_FLAGS=-O0 \
    -DCAI_INSTALL=OFF "$@" \
    >"$LOGS/$(basename "$dir")-configure.log" 2>&1 &&
    # shellcheck disable=SC2086
    cmake --build "$dir" -j "$JOBS" --target $targets >"$LOGS/$(basename "$dir")-build.log" 2>&1
}

# The ASan tree is the whole C++ suite (the nvcc compile check and the CCCL host tests too) and
# _cai; the TSan tree only the thread-heavy tests.
ASAN_TARGETS=all
ASAN_CMAKE_ARGS="-DCAI_BUILD_PYTHON=ON -DPython_EXECUTABLE=$PY"
TSAN_TARGETS="cai_test_device cai_test_threads cai_sim_driver"
TSAN_CMAKE_ARGS="-DCAI_BUILD_PYTHON=OFF -DCAI_BUILD_CUDA_CHECKS=OFF"

step_build() {
  echo "== build: ASan+UBSan ($ASAN_TARGETS) and TSan ($TSAN_TARGETS) trees"
  configure_and_build "$BUILD/asan" "$ASAN_FLAGS" "$ASAN_TARGETS" $ASAN_CMAKE_ARGS ||
    { note "build: ASan BUILD FAILED"; FAILED=1; }
  configure_and_build "$BUILD/tsan" "$TSAN_FLAGS" "$TSAN_TARGETS" $TSAN_CMAKE_ARGS ||
    { note "build: TSan BUILD FAILED"; FAILED=1; }
  [ $FAILED -eq 0 ] && note "build: done"
}

step_asan_cpp() {
  local dir=$BUILD/asan
  if [ -z "${ASAN_TREE_BUILT:-}" ]; then
    echo "== asan-cpp: building (logs in $LOGS)"
    # shellcheck disable=SC2086
    if ! configure_and_build "$dir" "$ASAN_FLAGS" "$ASAN_TARGETS" $ASAN_CMAKE_ARGS; then
      note "asan-cpp: BUILD FAILED (see $LOGS/asan-build.log)"; FAILED=1; return
    fi
    # Counts of this run only (the tree may be reused).
    find "$dir" -name '*.gcda' -delete
  fi
  # Leaks cai makes on purpose (see docs/reliability.md): the per-thread scratch-event cache
  # of src/sync/ordering.cpp is never freed, so that no event is destroyed after the driver.
  local supp=$BUILD/lsan.supp
  printf '%s\n' "# one cache (and one event) per host thread, leaked on purpose" \
    "leak:scratch_event" >"$supp"
  local log=$LOGS/asan-ctest.log rc
  export LSAN_OPTIONS=suppressions=$supp:print_suppressions=1
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CAI_BACKEND=sim \
    ctest --test-dir "$dir" --output-on-failure -j "$JOBS" >"$log" 2>&1
  rc=$?
  unset LSAN_OPTIONS
  report asan-cpp $rc "$log" "$(grep -E "tests passed|tests failed" "$log" | tail -n 1)" \
    "ERROR: (Address|Leak)Sanitizer|runtime error:"
}

step_asan_python() {
  local dir=$BUILD/asan
  if [ -z "${ASAN_TREE_BUILT:-}" ]; then
    echo "== asan-python: building _cai (incremental)"
    # shellcheck disable=SC2086
    if ! configure_and_build "$dir" "$ASAN_FLAGS" "_cai cai_sim_driver" $ASAN_CMAKE_ARGS; then
      note "asan-python: BUILD FAILED (see $LOGS/asan-build.log)"; FAILED=1; return
    fi
  fi
  # A package folder: the pure-Python part of cai plus the sanitized extension.
  local pkg=$dir/pkg/cai
  rm -rf "$dir/pkg" && mkdir -p "$pkg"
  cp "$ROOT"/python/cai/*.py "$pkg"/  # copies: the package finds its data next to its files
  ln -s "$dir"/python/_cai/_cai*.so "$pkg"/
  # What the wheel adds (headers, CMake package, stubs, py.typed), from the installed package:
  # the tests of `python -m cai --cmake-dir` and of the stubs use them.
  local installed entry
  installed=$("$PY" -c 'import cai, os; print(os.path.dirname(cai.__file__))') ||
    { note "asan-python: cai is not installed in $PY"; FAILED=1; return; }
  for entry in "$installed"/*; do
    case "$(basename "$entry")" in
      *.py | _cai*.so | _sim_driver | __pycache__) ;;
      *) ln -s "$entry" "$pkg"/ ;;
    esac
  done
  # The tree's simulated driver where the wheel keeps it (cai.sim.driver_path()).
  mkdir -p "$pkg/_sim_driver" && ln -s "$dir/sim_driver/libcuda.so.1" "$pkg/_sim_driver/"
  # The ASan runtime must come first; libstdc++ is preloaded too, or ASan's __cxa_throw
  # interceptor finds no real __cxa_throw (python itself does not link libstdc++) and the first
  # C++ exception aborts with "CHECK failed: ... real___cxa_throw".
  local asan_rt
  asan_rt="$($CXX -print-file-name=libasan.so) $($CXX -print-file-name=libstdc++.so)"
  if [ "${COVERAGE:-0}" = 1 ]; then
    # os._exit (forked children, hard exits) skips the write of the line counts at exit:
    # an _exit that writes them first. libgcov chains every module's counters, so the shim's
    # __gcov_dump writes _cai's too.
    local shim=$BUILD/coverage-exit.so
    printf '%s\n' '#define _GNU_SOURCE' '#include <dlfcn.h>' 'extern void __gcov_dump(void);' \
      'void _exit(int code) {' '  __gcov_dump();' \
      '  ((void (*)(int))dlsym(RTLD_NEXT, "_exit"))(code);' '  for (;;) {}' '}' \
      >"$BUILD/coverage-exit.c"
    gcc -shared -fPIC --coverage -fprofile-update=atomic -o "$shim" "$BUILD/coverage-exit.c" \
      -ldl || { note "asan-python: the coverage _exit shim did not build"; FAILED=1; return; }
    asan_rt="$asan_rt $shim"
  fi
  local log=$LOGS/asan-pytest.log rc
  echo "== asan-python: pytest ${SANITIZE_PYTEST:-tests/python} with $asan_rt preloaded (log: $log)"
  # The suite spawns subprocesses (shutdown, isolation): they inherit the preload.
  # shellcheck disable=SC2086
  LD_PRELOAD="$asan_rt" PYTHONMALLOC=malloc CAI_SANITIZED=asan CAI_BACKEND=sim \
  ASAN_OPTIONS=detect_leaks=0:handle_segv=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  PYTHONPATH="$dir/pkg" "$PY" -m pytest -q -p no:cacheprovider \
    --ignore=tests/python/test_add_extension.py --ignore=tests/python/test_caster.py \
    ${PYTEST_ARGS:-} ${SANITIZE_PYTEST:-tests/python} >"$log" 2>&1
  rc=$?
  # nanobind's list of instances alive after the interpreter's cleanup exits 0: a failure too.
  if [ $rc -eq 0 ] && grep -q "^nanobind: leaked" "$log"; then rc=1; fi
  report asan-python $rc "$log" "$(grep -E "passed|failed" "$log" | tail -n 1)" \
    "ERROR: AddressSanitizer|runtime error:|^nanobind: leaked"
}

step_tsan() {
  local dir=$BUILD/tsan
  echo "== tsan: building $TSAN_TARGETS"
  # shellcheck disable=SC2086
  if ! configure_and_build "$dir" "$TSAN_FLAGS" "$TSAN_TARGETS" $TSAN_CMAKE_ARGS; then
    note "tsan: BUILD FAILED (see $LOGS/tsan-build.log)"; FAILED=1; return
  fi
  local log=$LOGS/tsan.log rc=0
  : >"$log"
  # halt_on_error=0: report every race, then fail through exitcode.
  local opts="halt_on_error=0:second_deadlock_stack=1:history_size=4:exitcode=66"
  # Not the kernel grid tests: the CPU grid runner is single-threaded (nothing for TSan to
  # find) and takes half a minute under it; ASan+UBSan runs them.
  # Run outside ctest: they are told where their tree's simulated driver is.
  local sim="CAI_SIM_DRIVER=$dir/sim_driver/libcuda.so.1"
  env TSAN_OPTIONS=$opts CAI_BACKEND=sim "$sim" "$dir/tests/cpp/cai_test_device" \
    --gtest_filter='-kernel_grid.*' >>"$log" 2>&1 || rc=1
  env TSAN_OPTIONS=$opts CAI_BACKEND=sim "$sim" "$dir/tests/cpp/cai_test_threads" >>"$log" 2>&1 || rc=1
  report tsan $rc "$log" "$(grep -E "^\[  (PASSED|FAILED)  \]" "$log" | tr '\n' ' ')" \
    "WARNING: ThreadSanitizer"
}

step_coverage() {
  local dir=$BUILD/asan log=$LOGS/coverage.txt rc=0
  local min=${COVERAGE_MIN:-90} min_cuda=${COVERAGE_MIN_CUDA:-96}
  if [ "${COVERAGE:-0}" != 1 ]; then
    note "coverage: not measured (COVERAGE=1 builds the ASan tree with --coverage)"; return
  fi
  # Every object of the tree: the backend's headers are compiled into the tests and _cai too.
  # One gcovr run over src/; the per-file summary gives both totals. --merge-lines: a line
  # counts once, however many functions (template copies, one macro line's expansions) hold it.
  "$PY" -m gcovr --root "$ROOT" --filter 'src/' --merge-lines --txt "$log" \
    --json-summary "$LOGS/coverage-summary.json" \
    "$dir" >"$LOGS/coverage-gcovr.log" 2>&1 || rc=$?
  local result
  result=$("$PY" - "$LOGS/coverage-summary.json" "$min_cuda" "$min" <<'PY'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
def total(prefix):
    fs = [f for f in files if f["filename"].startswith(prefix)]
    covered, lines = sum(f["line_covered"] for f in fs), sum(f["line_total"] for f in fs)
    return covered, lines, 100.0 * covered / max(lines, 1)
out, ok = [], True
for prefix, floor in (("src/device/backend/", float(sys.argv[2])), ("src/", float(sys.argv[3]))):
    c, n, pct = total(prefix)
    ok = ok and pct >= floor
    out.append(f"{prefix} {pct:.1f}% ({c} of {n} lines; at least {floor:g}%)")
print(("PASS " if ok else "FAIL ") + "; ".join(out))
PY
  ) || rc=$?
  if [ $rc -eq 0 ] && [ "${result%% *}" = PASS ]; then
    note "coverage: ${result} (per file: $log)"
  else
    note "coverage: ${result:-FAIL (gcovr failed: $LOGS/coverage-gcovr.log)}"
    FAILED=1
  fi
  tail -n 14 "$log" 2>/dev/null
}

# The Python suite under ASan is the longest step and runs on one core: when the C++ steps run
# too, the ASan tree is built first and the Python suite runs beside them (the gcov counters
# are merged under a file lock, so both may write them).
ASAN_PYTHON_PID=
if [[ " ${STEPS[*]} " == *" asan-python "* ]] &&
  { [[ " ${STEPS[*]} " == *" asan-cpp "* ]] || [[ " ${STEPS[*]} " == *" tsan "* ]]; }; then
  targets="_cai cai_sim_driver"
  [[ " ${STEPS[*]} " == *" asan-cpp "* ]] && targets=$ASAN_TARGETS
  echo "== asan: building the ASan tree ($targets; logs in $LOGS)"
  # shellcheck disable=SC2086
  if configure_and_build "$BUILD/asan" "$ASAN_FLAGS" "$targets" $ASAN_CMAKE_ARGS; then
    export ASAN_TREE_BUILT=1
    find "$BUILD/asan" -name '*.gcda' -delete
    ( SUMMARY=() FAILED=0; step_asan_python >/dev/null
      printf '%s\n' "${SUMMARY[@]}" >"$LOGS/asan-python.summary"; exit $FAILED ) &
    ASAN_PYTHON_PID=$!
    echo "== asan-python: running beside the other steps"
  else
    note "asan: BUILD FAILED (see $LOGS/asan-build.log)"; FAILED=1; STEPS=()
  fi
fi
# wait_asan_python: the background Python suite's result, into the summary.
wait_asan_python() {
  [ -n "$ASAN_PYTHON_PID" ] || return 0
  wait "$ASAN_PYTHON_PID" || FAILED=1
  ASAN_PYTHON_PID=
  local line
  while IFS= read -r line; do note "$line"; done <"$LOGS/asan-python.summary"
}

for step in "${STEPS[@]}"; do
  case "$step" in
    asan-cpp) step_asan_cpp ;;
    asan-python) [ -n "$ASAN_PYTHON_PID" ] || step_asan_python ;;
    tsan) step_tsan ;;
    coverage) wait_asan_python; step_coverage ;;
    build) step_build ;;
    *) echo "unknown step '$step' (asan-cpp, asan-python, tsan, coverage, build)"; exit 2 ;;
  esac
done
wait_asan_python

echo
echo "== sanitizer summary"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
