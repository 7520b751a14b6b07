#!/usr/bin/env bash
# The GPU check, in one command, on a machine with an NVIDIA GPU and no network (docs/gpu.md).
# Built for a lent machine: at most 10 minutes a command, 15 minutes a session, start included.
#
#   scripts/gpu-check.sh --quick                          # the essentials, within 8 minutes
#   scripts/gpu-check.sh --part 1                         # the rest, in parts (1 to 6) of at
#                                                         # most 9 minutes each
#   scripts/gpu-check.sh                                  # every step (more than one command)
#   GPU_CHECK_STEPS=fast scripts/gpu-check.sh              # phase 1 only (about 3 minutes)
#   GPU_CHECK_STEPS="install pytest-ordering" scripts/gpu-check.sh   # only these steps
#
# --quick and --part N choose the steps by the PLAN's last column and set the budget (480 s for
# --quick, 540 s for a part) unless GPU_CHECK_BUDGET is set; a part builds what its steps need
# first (install, or cpp), incrementally on a warm machine. Where there is no GPU (no NVIDIA
# driver, nvidia-smi finds none, or CAI_BACKEND set to something else than cuda) the script stops
# at once, saying why, with exit status 3 (GPU_CHECK_ALLOW_NO_GPU=1 runs it anyway: its own
# tests). On exit, or when stopped (INT, TERM), it ends every process it started.
#
# THE STEPS, in the order they run (the PLAN below is the list the script follows):
#
# Phase 1, "fast", meant to end within 3 minutes on 16 cores (an estimate: never measured
# yet): the device layer against the driver and the fixed bugs' cases. Two chains at once:
#   facts            machine facts (GPU, driver, toolkit, compilers, library versions)
#   cpp              chain 1: the C++ device tests only, cai_test_device and cai_test_driver_abi,
#                    test code at -O0 (GoogleTest from .gtest/)
#   ctest-cuda       chain 1: the CUDA ctest group with CAI_BACKEND=cuda:
#                    driver/cuda_backend_test.*/cuda, backend_pools.*, backend_select.*,
#                    driver_loader.*, DriverAbi.*
#   install          chain 2: pip install --no-build-isolation --no-deps .
#   example          chain 2: examples/add_extension from the installed package, in the
#                    background while regressions runs
#   regressions      chain 2: tests/gpu/test_gpu_regressions.py, the fixed bugs' cases on the
#                    hardware, but for the extension's
#   regressions-ext  chain 2: its extension cases (the C API's memory check), once example is
#                    built
# Phase 2: tests/gpu one file a step, the most important first, then the slow extras.
#   pytest-ordering       stream ordering on hardware, with negative controls: the rewrite's
#                         reverse wait on the legacy stream is new and never ran on a GPU
#   pytest-add_extension  the extension's kernel on foreign arrays and behind a busy producer
#   pytest-costs          driver calls per import and per use (the import events are new)
#   pytest-lifetime       real allocators hand freed blocks out again: use-after-free checks
#   pytest-threads        8 threads, each with its own streams, at once
#   pytest-interop        the zero-copy matrix with every library, layout and dtype (long)
#   pytest-ipc            CUDA IPC between processes (spawned children: slow to start)
#   pytest-package        view methods, `python -m cai info`/demo, the docs' `python gpu` blocks
#   sanitizer             compute-sanitizer memcheck: the demo and every operation
#   pytest-memory         2000 rounds of exchanges: no device memory kept
#   pytest-rest           any tests/gpu/test_*.py no step above names (none today)
#   bench                 bench/gpu_interop.py (numbers for docs/benchmarks.md)
#   ctest-rest            the other C++ suites (CI runs them on the simulator), nvcc's compile
#                         check and the CCCL host tests
#
# Results, each rewritten as soon as a step ends (a run cut off anywhere, by the device's
# command limit included, still reports every step before the cut; the steps not reached are
# listed as "pending"): $OUT (default ./gpu-check-out) holds gpu-summary.md, gpu-results.json
# (for `bench/gpu_report.py --from-results ... --write-docs`), gpu-check.log (this console, as
# it runs), gpu-logs.tar.gz (every step's log, notes, JUnit XML and pytest progress), and after
# the bench step gpu-bench.md / gpu-bench.json. Work files: build/gpu-check/ (GPU_CHECK_WORK),
# build/gpu-*. A failing step does not stop the later ones; the exit status is non-zero when any
# step failed. The run stays within GPU_CHECK_BUDGET seconds (default 540, for a command limit
# of 600): a step gets at most its own limit and what is left; a step that cannot get its
# minimum is reported as not run.
#
# Environment: OUT, PYTHON (default python3), JOBS (default: all cores), GPU_CHECK_BUDGET,
# GPU_CHECK_STEPS (step names, and "fast", "phase2", "pytest" for groups; default all),
# GPU_CHECK_COMMIT (the commit checked, when the copy has no .git), GTEST_DIR (GoogleTest
# sources where no GTest package is installed; default .gtest), BENCH_ARGS (extra arguments of
# bench/gpu_interop.py), GPU_CHECK_WORK.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
SELF=$ROOT/scripts/gpu-check.sh

# name  group  max-seconds  min-seconds  junit ("-": none)  part. Phase 1 is the group "fast".
# part: "q" for --quick, N for --part N; a part runs facts and the build its steps need
# (install, or cpp for ctest-rest) first. The maxima on a run's longest chain add up to at
# most its budget (docs/gpu.md).
PLAN="
facts                 fast     30   0  -                         q
cpp                   fast    200  60  -                         q
ctest-cuda            fast     90  15  ctest-cuda.xml            q
install               fast    220  60  -                         q
example               fast     90  20  -                         1
regressions           fast     70  20  regressions.xml           q
regressions-ext       fast     60  10  regressions-ext.xml       1
pytest-ordering       pytest   70  20  pytest-ordering.xml       q
pytest-add_extension  pytest   60  15  pytest-add_extension.xml  1
pytest-costs          pytest   45  10  pytest-costs.xml          1
pytest-lifetime       pytest   60  15  pytest-lifetime.xml       2
pytest-threads        pytest   90  20  pytest-threads.xml        3
pytest-interop        pytest  150  30  pytest-interop.xml        2
pytest-ipc            pytest   90  30  pytest-ipc.xml            q
pytest-package        pytest   90  20  pytest-package.xml        3
sanitizer             -       150  40  -                         4
pytest-memory         pytest   90  20  pytest-memory.xml         3
pytest-rest           pytest   90  15  pytest-rest.xml           4
bench                 -       150  40  -                         6
ctest-rest            -       240  60  ctest-rest.xml            5
"
PARTS=6
# The CUDA ctest group: the backend on the real driver (the /cuda instances skip themselves
# without one), the pool and chunk cases, backend selection, the loader, the ABI against cuda.h.
CTEST_CUDA_REGEX='/cuda$|^backend_pools\.|^backend_select\.|^driver_loader\.|^DriverAbi\.'

export OUT=${OUT:-$ROOT/gpu-check-out}
export WORK=${GPU_CHECK_WORK:-$ROOT/build/gpu-check}
export PYTHON=${PYTHON:-python3}
export JOBS=${JOBS:-$(nproc)}
export GTEST_DIR=${GTEST_DIR:-$ROOT/.gtest}
export BENCH_ARGS=${BENCH_ARGS:-}
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
export PYTHONUNBUFFERED=1
export CPP_BUILD=$ROOT/build/gpu-cpp
export EXT_BUILD=$ROOT/build/gpu-add_extension
MODE=all
case "${1:-}" in
  --quick) MODE=quick ;;
  --part)
    MODE=part
    PART=${2:-}
    if ! [[ $PART =~ ^[1-9][0-9]*$ ]] || [ "$PART" -gt "$PARTS" ]; then
      echo "gpu-check.sh: --part takes a number from 1 to $PARTS, got '${PART}'" >&2
      exit 2
    fi ;;
  --step | "") ;;
  *) echo "gpu-check.sh: unknown option $1 (expected --quick, --part N or nothing)" >&2; exit 2 ;;
esac
BUDGET=${GPU_CHECK_BUDGET:-$([ "$MODE" = quick ] && echo 480 || echo 540)}
STEPS=${GPU_CHECK_STEPS:-all}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 && export CUDACXX=${CUDACXX:-$(command -v nvcc)}

plan_field() {  # name field-number (1 name, 2 group, 3 max, 4 min, 5 junit, 6 part)
  awk -v n="$1" -v f="$2" '$1 == n {print $f}' <<<"$PLAN"
}
plan_names() { awk 'NF {print $1}' <<<"$PLAN"; }
part_names() { awk -v p="$1" 'NF && $6 == p {print $1}' <<<"$PLAN"; }

# The steps of --quick or --part N: facts, the part's steps, and the build they need.
mode_steps() {
  local names n build=""
  if [ "$MODE" = quick ]; then
    part_names q | paste -sd' '
    return
  fi
  names=$(part_names "$PART")
  for n in $names; do
    case $n in
      ctest-rest) build+=" cpp" ;;
      *) [[ $build == *install* ]] || build+=" install" ;;
    esac
  done
  echo "facts$build $names" | tr '\n' ' '
}

# Why this machine cannot run the check (empty when it can): the check runs cai's CUDA backend.
no_gpu_reason() {
  if [ -n "${CAI_BACKEND:-}" ] && [ "$CAI_BACKEND" != cuda ]; then
    echo "CAI_BACKEND=$CAI_BACKEND: the GPU check runs cai's CUDA backend only (unset it or set" \
      "CAI_BACKEND=cuda)"
  elif ! "$PYTHON" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' >/dev/null 2>&1; then
    echo "no NVIDIA driver here: libcuda.so.1 does not load"
  elif command -v nvidia-smi >/dev/null 2>&1 && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "nvidia-smi finds no GPU: $(nvidia-smi -L 2>&1 | head -n 1)"
  fi
}

# Every process this run started carries GPU_CHECK_RUN, orphans included (spawned children of
# a step that timed out): at exit, or when stopped, they are ended, TERM then KILL.
end_started_processes() {
  local sig p pids
  for sig in TERM KILL; do
    pids=()
    for p in /proc/[0-9]*; do
      p=${p#/proc/}
      [ "$p" = "$$" ] && continue
      grep -qxz "GPU_CHECK_RUN=$GPU_CHECK_RUN" "/proc/$p/environ" 2>/dev/null && pids+=("$p")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -s "$sig" "${pids[@]}" 2>/dev/null
    [ "$sig" = KILL ] || sleep 2
  done
}

note() {  # one line of the step's note (tabs and newlines would break steps.tsv)
  local t="$*"
  t=${t//$'\t'/ }
  printf '%s\n' "${t//$'\n'/ }" | cut -c1-200 >>"$WORK/notes/$STEP"
}
skip() { note "$*"; exit 77; }
cai_backend() {  # 'cuda', or the error that says why not
  (cd /tmp && CAI_BACKEND=cuda "$PYTHON" -c "import cai; print(cai.backend())" 2>&1 | tail -n 1)
}
need_cuda_backend() {
  local b
  b=$(cai_backend)
  [ "$b" = cuda ] || skip "cai has no CUDA backend here: $b"
}
generator() { command -v ninja >/dev/null 2>&1 && echo "-GNinja" || echo "-GUnix Makefiles"; }
ext_built() { ls "$EXT_BUILD"/_add_ext* >/dev/null 2>&1; }

# ----- the steps (each runs as `gpu-check.sh --step NAME`, under a time limit) -------------------

step_facts() {
  echo "--- nvidia-smi"; nvidia-smi || echo "(no nvidia-smi)"
  echo "--- nvcc"; nvcc --version || echo "(no nvcc)"
  echo "--- compilers and tools"
  g++ --version | head -n 1; cmake --version | head -n 1; ninja --version || true
  compute-sanitizer --version 2>/dev/null | tail -n 1 || echo "(no compute-sanitizer on PATH)"
  echo "--- python"; command -v "$PYTHON"; "$PYTHON" -VV
  "$PYTHON" - >"$WORK/facts.txt" <<'EOF'
import os, platform, subprocess, sys
from importlib.metadata import version

def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:  # noqa: BLE001
        return ""

gpu = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
print("GPU: " + (gpu or "none found by nvidia-smi"))
nvcc = [line for line in run(["nvcc", "--version"]).splitlines() if "release" in line]
print("CUDA toolkit: " + (nvcc[0].strip() if nvcc else "no nvcc"))
gxx = run(["g++", "--version"]).splitlines()
cmake = run(["cmake", "--version"]).splitlines()
print(f"Host: {os.cpu_count()} cores, {platform.platform()}; "
      f"{gxx[0] if gxx else 'no g++'}; {cmake[0] if cmake else 'no cmake'}")
libs = []
for name in ("numpy", "cupy-cuda13x", "cupy-cuda12x", "torch", "jax", "jaxlib", "numba",
             "numba-cuda", "cuda-core", "cuda-bindings", "ml-dtypes", "nanobind",
             "scikit-build-core", "pytest", "pytest-timeout", "hypothesis"):
    try:
        libs.append(f"{name} {version(name)}")
    except Exception:  # noqa: BLE001
        pass
print(f"Python {platform.python_version()} ({sys.executable}): " + ", ".join(libs))
EOF
  cat "$WORK/facts.txt"
  [ -f "$GTEST_DIR/CMakeLists.txt" ] || note "no GoogleTest sources in $GTEST_DIR (carry .gtest)"
}

# The C++ device tests only (phase 1): the layers optimized, the test code at -O0 (GoogleTest
# test files compile about five times faster), no nvcc compile check (ctest-rest builds the rest).
step_cpp() {
  local gtest=() targets=(cai_test_device)
  if [ -f "$GTEST_DIR/CMakeLists.txt" ]; then
    gtest=(-DCAI_GTEST_SOURCE_DIR="$(cd "$GTEST_DIR" && pwd)")
    note "GoogleTest from $GTEST_DIR"
  fi
  cmake -S . -B "$CPP_BUILD" "$(generator)" -DCMAKE_BUILD_TYPE=Release -DCAI_BUILD_TESTS=ON \
    -DCAI_TEST_CXX_FLAGS=-O0 -DCAI_BUILD_CUDA_CHECKS=OFF -DCAI_BUILD_BENCH=OFF \
    -DCAI_BUILD_PYTHON=OFF -DCAI_INSTALL=OFF -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${gtest[@]}" 2>&1 | tee "$WORK/cpp-configure.log"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    grep -qi "gtest" "$WORK/cpp-configure.log" &&
      note "configure failed: no GoogleTest (carry its sources in .gtest/, docs/gpu.md)"
    return 1
  fi
  grep -q "kernels compiled to PTX" "$WORK/cpp-configure.log" ||
    note "no nvcc at configure time: no PTX, the kernels cannot run on the GPU"
  if grep -q "test_driver_abi) is skipped" "$WORK/cpp-configure.log"; then
    note "cuda.h not found: no cai_test_driver_abi"
  else
    targets+=(cai_test_driver_abi)
  fi
  cmake --build "$CPP_BUILD" -j "$JOBS" --target "${targets[@]}"
}

count_run_cuda_cases() {  # junit-file: how many /cuda cases ran (not skipped)
  "$PYTHON" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
print(sum(1 for c in cases if c.get("name", "").endswith("/cuda") and c.get("status") == "run"))
EOF
}

step_ctest_cuda() {
  local exe rc ran
  exe=$(find "$CPP_BUILD" -name cai_test_device -type f 2>/dev/null | head -n 1)
  [ -n "$exe" ] || skip "not run: the C++ device tests were not built (see cpp)"
  # The /cuda cases skip themselves where no driver loads: make sure this one does not.
  if CAI_BACKEND=cuda "$exe" --gtest_filter='driver/cuda_backend_test.devices/cuda' 2>&1 |
    grep -q '\[  SKIPPED \]'; then
    note "the /cuda cases skip themselves: the backend found no CUDA driver or GPU"
    rc=1
  fi
  CAI_BACKEND=cuda ctest --test-dir "$CPP_BUILD" -j "$JOBS" --output-on-failure --timeout 120 \
    --no-tests=error --output-junit "$WORK/ctest-cuda.xml" -R "$CTEST_CUDA_REGEX" || rc=1
  ran=$(count_run_cuda_cases "$WORK/ctest-cuda.xml" 2>/dev/null || echo 0)
  note "$ran /cuda cases ran"
  [ "$ran" != 0 ] || rc=1
  return "${rc:-0}"
}

# g++ without link-time optimization, for a toolchain whose LTO plugin is broken ("could not
# run lto-wrapper"): a wrapper that drops the -flto flags and runs the real compiler.
make_nolto_wrappers() {
  local dir=$WORK/nolto name real
  mkdir -p "$dir"
  for name in c++ g++ gcc cc; do
    real=$(command -v "$name") || continue
    printf '%s\n' '#!/usr/bin/env bash' 'args=()' 'for a in "$@"; do' \
      '  case "$a" in -flto | -flto=* | -fno-fat-lto-objects | -fuse-linker-plugin) ;;' \
      '    *) args+=("$a") ;; esac' 'done' "exec $real \"\${args[@]}\"" >"$dir/$name"
    chmod +x "$dir/$name"
  done
  echo "$dir"
}

step_install() {
  local flags=(--no-build-isolation --no-deps --disable-pip-version-check -v)
  echo "--- pip install . (as shipped)"
  if "$PYTHON" -m pip install "${flags[@]}" --config-settings=build-dir=build/gpu-python . 2>&1 |
    tee "$WORK/pip-as-shipped.log"; then
    note "as shipped"
  elif grep -qiE "lto-wrapper|lto1|lto plugin|-flto" "$WORK/pip-as-shipped.log"; then
    note "as shipped: FAILED (link-time optimization: see the log); installed with -flto" \
      "dropped by a compiler wrapper"
    local dir
    dir=$(make_nolto_wrappers)
    echo "--- pip install . (no LTO: CC=$dir/gcc CXX=$dir/g++)"
    CC=$dir/gcc CXX=$dir/g++ "$PYTHON" -m pip install "${flags[@]}" \
      --config-settings=build-dir=build/gpu-python-nolto \
      --config-settings=cmake.define.CMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF . || return 1
    SHIPPED_FAILED=1
  else
    note "pip install failed (not an LTO error; see the log)"
    return 1
  fi
  echo "--- import"
  local backend
  backend=$(cai_backend)
  echo "cai.backend() with CAI_BACKEND=cuda: $backend"
  if [ "$backend" != cuda ]; then
    note "installed, but cai has no CUDA backend: $backend"
    nvidia-smi -L >/dev/null 2>&1 && return 1  # a GPU is there: cai must find it
  fi
  [ -z "${SHIPPED_FAILED:-}" ]
}

# How the example extension is built: only through the pip-installed package (python -m cai
# --cmake-dir), as scripts/test.sh builds it. This is the one place to adapt when that changes.
build_add_extension() {
  local cmake_dir
  cmake_dir=$(cd /tmp && "$PYTHON" -m cai --cmake-dir) || return 1
  cmake -S examples/add_extension -B "$EXT_BUILD" "$(generator)" -DCMAKE_BUILD_TYPE=Release \
    -Dcai_DIR="$cmake_dir" -DPython_EXECUTABLE="$(command -v "$PYTHON")" &&
    cmake --build "$EXT_BUILD" -j "$JOBS"
}

step_example() {
  (cd /tmp && "$PYTHON" -m cai --cmake-dir) >/dev/null 2>&1 ||
    skip "not run: cai is not pip-installed (see install)"
  build_add_extension || return 1
  ext_built || { note "built, but no _add_ext module"; return 1; }
  need_cuda_backend
  (cd /tmp && CAI_BACKEND=cuda PYTHONPATH="$EXT_BUILD" "$PYTHON" -c "
import numpy as np, cai, _add_ext
a = cai.to_device(np.arange(8, dtype=np.float32))
out = cai.device_array(8, dtype=np.float32)
_add_ext.add(a, a, out)
assert (out.copy_to_host() == 2 * np.arange(8)).all()
print('_add_ext.add ok')")
}

# tests/gpu files through tests/gpu/crash_safe_pytest.py: a test that kills the interpreter (a
# peer library aborting inside its own code) costs that test, reported as failed by name; when
# the step's time is up, the runner still writes the JUnit XML of what finished (the test that
# was running counts as failed, "timed out"). `exec`, so that `timeout` waits for that report.
run_pytest() {  # pytest arguments (files, -k ...)
  need_cuda_backend
  local args=(-v -rfEs -p no:cacheprovider)
  "$PYTHON" -c "import pytest_timeout" 2>/dev/null && args+=(--timeout=120)
  if ext_built; then
    export CAI_ADD_EXT_DIR=$EXT_BUILD
  elif [[ $STEP == regressions-ext || $STEP == pytest-add_extension ]]; then
    note "no example extension (see example): its cases skip"
  fi
  exec env CAI_BACKEND=cuda "$PYTHON" tests/gpu/crash_safe_pytest.py \
    --junitxml="$WORK/$(plan_field "$STEP" 5)" --progress "$WORK/progress-$STEP.txt" \
    -- "${args[@]}" "$@"
}

pytest_file_of() {  # step name -> its tests/gpu file
  case $1 in
    regressions | regressions-ext) echo tests/gpu/test_gpu_regressions.py ;;
    pytest-ipc) echo tests/gpu/test_ipc_gpu.py ;;
    pytest-*) echo "tests/gpu/test_gpu_${1#pytest-}.py" ;;
  esac
}

step_pytest_file() {
  local f
  f=$(pytest_file_of "$STEP")
  [ -f "$f" ] || { note "$f is missing"; return 1; }
  case $STEP in
    # The extension's cases run as soon as it is built, the others before.
    regressions) run_pytest -k "not extension_kernels" "$f" ;;
    regressions-ext) run_pytest -k extension_kernels "$f" ;;
    *) run_pytest "$f" ;;
  esac
}

step_pytest_rest() {
  local named=() rest=() f n
  for n in $(plan_names); do
    case $n in regressions* | pytest-*) named+=("$(pytest_file_of "$n")") ;; esac
  done
  for f in tests/gpu/test_*.py; do
    [[ " ${named[*]} " == *" $f "* ]] || rest+=("$f")
  done
  [ ${#rest[@]} -gt 0 ] || skip "every tests/gpu file has its own step"
  note "files no step names: ${rest[*]}"
  run_pytest "${rest[@]}"
}

step_bench() {
  need_cuda_backend
  local args=()
  read -r -a args <<<"$BENCH_ARGS"
  CAI_BACKEND=cuda "$PYTHON" bench/gpu_interop.py "${args[@]}" --json "$WORK/gpu-bench.json" \
    --markdown "$WORK/gpu-bench.md"
}

step_sanitizer() {
  local san
  san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) \
    || skip "no compute-sanitizer"
  need_cuda_backend
  # API errors are not counted: cai asks the driver about pointers it may not know (pageable
  # host memory answers CUDA_ERROR_INVALID_VALUE by design); memory errors are.
  local args=(--tool memcheck --report-api-errors no --error-exitcode 86 --print-limit 50)
  local rc=0
  echo "--- memcheck: python -m cai demo"
  (cd /tmp && CAI_BACKEND=cuda "$san" "${args[@]}" "$PYTHON" -m cai demo) ||
    { rc=1; note "demo: memcheck failed"; }
  echo "--- memcheck: tests/gpu/sanitize_ops.py"
  CAI_BACKEND=cuda "$san" "${args[@]}" "$PYTHON" tests/gpu/sanitize_ops.py ||
    { rc=1; note "operations: memcheck failed"; }
  return "$rc"
}

# The rest of the C++ suites (core, device on the simulator, sync, arrays, threads), nvcc's
# compile check of ArrayRef and the CCCL host tests: the same build folder, reconfigured.
step_ctest_rest() {
  [ -f "$CPP_BUILD/CMakeCache.txt" ] || skip "not run: no C++ build (see cpp)"
  cmake "$CPP_BUILD" -DCAI_BUILD_CUDA_CHECKS=ON || return 1
  cmake --build "$CPP_BUILD" -j "$JOBS" || return 1
  # CAI_BACKEND unset, as in CI: the suites that use the process-wide backend get the CUDA one
  # here (those that need the simulator say so and skip, or choose it themselves).
  env -u CAI_BACKEND ctest --test-dir "$CPP_BUILD" -j "$JOBS" --output-on-failure --timeout 120 \
    --no-tests=error --output-junit "$WORK/ctest-rest.xml" -E "$CTEST_CUDA_REGEX"
}

if [ "${1:-}" = "--step" ]; then
  STEP=$2
  fn=step_${STEP//-/_}
  if ! declare -F "$fn" >/dev/null; then
    case $STEP in regressions* | pytest-*) fn=step_pytest_file ;; *)
      echo "gpu-check.sh: no step $STEP" >&2; exit 2 ;; esac
  fi
  set -x
  "$fn"
  exit $?
fi

# ----- the run ----------------------------------------------------------------------------------

# Writes what has finished to $OUT: the summary and results (bench/gpu_report.py, with the steps
# not finished yet listed as pending), the bench tables, and the logs. Each file is written
# aside and renamed, so a run cut off meanwhile leaves the previous version whole.
report() {
  local now=$WORK/steps-now.tsv n pending=()
  cp "$WORK/steps.tsv" "$now"
  for n in $(plan_names); do
    if ! cut -f1 "$WORK/steps.tsv" | grep -qx -- "$n" && ! grep -qx -- "$n" "$WORK/recorded"; then
      pending+=("$n")
      printf '%s\tpending\t0\tnot finished: running, not reached yet, or the run was cut off\t\n' \
        "$n" >>"$now"
    fi
  done
  if "$PYTHON" bench/gpu_report.py --steps "$now" --facts "$WORK/facts.txt" \
    --bench "$WORK/gpu-bench.json" --commit "$COMMIT" --summary "$OUT/gpu-summary.md.new" \
    --json "$OUT/gpu-results.json.new" >/dev/null 2>"$WORK/logs/report.err"; then
    mv -f "$OUT/gpu-results.json.new" "$OUT/gpu-results.json"
  else
    rm -f "$OUT/gpu-results.json.new"
    {
      echo "# GPU check (bench/gpu_report.py failed; the raw steps)"
      echo
      cat "$now"
    } >"$OUT/gpu-summary.md.new"
  fi
  if [ ${#pending[@]} -gt 0 ]; then
    # First, under the title: the reader of a cut-off run must not miss it.
    local line
    line=$(printf '**Incomplete** (%s UTC, %ss into the run): %s steps not finished: %s.' \
      "$(date -u +%H:%M)" "$SECONDS" "${#pending[@]}" "${pending[*]}")
    awk -v l="$line" 'NR == 2 {print ""; print l} {print}' "$OUT/gpu-summary.md.new" \
      >"$OUT/gpu-summary.md.tmp" && mv -f "$OUT/gpu-summary.md.tmp" "$OUT/gpu-summary.md.new"
  fi
  mv -f "$OUT/gpu-summary.md.new" "$OUT/gpu-summary.md"
  local f
  for f in gpu-bench.json gpu-bench.md; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
  (cd "$WORK" && find . -maxdepth 2 \( -name '*.xml' -o -name '*.log' -o -name '*.txt' \
    -o -name '*.tsv' -o -name '*.err' -o -path './notes/*' \) -print0 |
    tar -czf "$OUT/gpu-logs.tar.gz.new" --null -T -) &&
    mv -f "$OUT/gpu-logs.tar.gz.new" "$OUT/gpu-logs.tar.gz"
}

record() {  # name status seconds note junit; then the report (two steps may end at once)
  (
    flock 9
    printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$WORK/steps.tsv"
    report
  ) 9>"$WORK/.lock"
}

selected() {  # name group
  [[ " $STEPS " == *" all "* || " $STEPS " == *" $1 "* || " $STEPS " == *" $2 "* ]] && return 0
  [ "$2" != fast ] && [[ " $STEPS " == *" phase2 "* ]]
}

run_step() {  # name
  local name=$1 group max min junit left limit t0 rc dt status note=""
  group=$(plan_field "$name" 2) max=$(plan_field "$name" 3) min=$(plan_field "$name" 4)
  junit=$(plan_field "$name" 5)
  [ "$junit" = - ] && junit=""
  if ! selected "$name" "$group"; then
    echo "$name" >>"$WORK/recorded"
    if [ "$group" = pytest ]; then
      # One row for the whole group when none of it is selected.
      local n any=""
      for n in $(plan_names); do
        [ "$(plan_field "$n" 2)" = pytest ] && selected "$n" pytest && any=1
      done
      [ -n "$any" ] && record "$name" skip 0 "not selected (GPU_CHECK_STEPS)" ""
      if [ -z "$any" ] && ! cut -f1 "$WORK/steps.tsv" | grep -qx pytest; then
        record pytest skip 0 "not selected (GPU_CHECK_STEPS): every pytest-* step" ""
      fi
    else
      record "$name" skip 0 "not selected (GPU_CHECK_STEPS)" ""
    fi
    return
  fi
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt "$min" ]; then
    record "$name" skip 0 "not run: ${left}s left of the ${BUDGET}s budget" ""
    echo "== $name: not run (${left}s left of the budget)"
    return
  fi
  limit=$((max < left ? max : left))
  echo "== $name (at most ${limit}s, at ${SECONDS}s)"
  t0=$SECONDS
  timeout --kill-after=10 "$limit" "$SELF" --step "$name" >"$WORK/logs/$name.log" 2>&1
  rc=$?
  dt=$((SECONDS - t0))
  [ -f "$WORK/notes/$name" ] && note=$(paste -sd'\t' "$WORK/notes/$name" | sed 's/\t/; /g')
  case $rc in
    0) status=pass ;;
    77) status=skip ;;
    124 | 137) status=fail note="timed out after ${limit}s${note:+; $note}" ;;
    *) status=fail ;;
  esac
  record "$name" "$status" "$dt" "$note" "$junit"
  echo "   $name: $status in ${dt}s${note:+ ($note)}"
  if [ $status = fail ]; then tail -n 30 "$WORK/logs/$name.log" | sed 's/^/   | /'; fi
}

main() {
  echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $COMMIT, budget ${BUDGET}s," \
    "mode: $MODE${PART:+ $PART}, steps: $STEPS"
  echo "plan: $(plan_names | paste -sd" ")"
  report
  # Phase 1. The C++ device tests and the Python package build at the same time (two builds of
  # -j JOBS); each chain goes on as soon as its build is done. The example builds while the
  # regression cases that do not need it run.
  run_step facts
  { run_step cpp; run_step ctest-cuda; } &
  local cpp_chain=$! example_job
  run_step install
  run_step example &
  example_job=$!
  run_step regressions
  wait $example_job
  run_step regressions-ext
  wait $cpp_chain
  echo "== phase 1 (fast) done at ${SECONDS}s"
  # Phase 2: everything else, in the order of the plan.
  local n
  for n in $(plan_names); do
    [ "$(plan_field "$n" 2)" = fast ] || run_step "$n"
  done

  echo "== summary"
  cat "$OUT/gpu-summary.md"
  local failed
  failed=$(awk -F'\t' '$2 == "fail" {print $1}' "$WORK/steps.tsv" | paste -sd' ')
  if [ -n "$failed" ]; then
    echo "gpu-check: FAILED: $failed; results in $OUT"
    return 1
  fi
  echo "gpu-check: all steps passed or skipped; results in $OUT"
}

if [ -z "${GPU_CHECK_ALLOW_NO_GPU:-}" ]; then
  why=$(no_gpu_reason)
  if [ -n "$why" ]; then
    echo "gpu-check: not run: $why. This check needs a machine with an NVIDIA GPU (docs/gpu.md)."
    exit 3
  fi
fi
if [ "$MODE" != all ]; then
  if [ -n "${GPU_CHECK_STEPS:-}" ]; then
    echo "gpu-check.sh: --$MODE chooses the steps; unset GPU_CHECK_STEPS" >&2
    exit 2
  fi
  STEPS=$(mode_steps)
fi

export GPU_CHECK_RUN=$$.$RANDOM$RANDOM
trap end_started_processes EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/notes" "$OUT"
: >"$WORK/steps.tsv"
: >"$WORK/recorded"
COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}
# In the background, so that INT and TERM run their traps at once (bash runs a trap only
# once the foreground command is done).
(
  main 2>&1 | tee "$OUT/gpu-check.log"
  exit "${PIPESTATUS[0]}"
) &
wait $!
exit $?
