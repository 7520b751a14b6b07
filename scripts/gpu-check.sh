#!/usr/bin/env bash
# The GPU check, in one command, on a machine with an NVIDIA GPU and no network (docs/gpu.md):
# machine facts; build and install cai with the tools installed there; the C++ suites and the
# CUDA ctest group; the example extension; the GPU pytest suite (tests/gpu); the GPU benchmarks;
# compute-sanitizer memcheck on the demo and on an operations script; a summary.
#
#   scripts/gpu-check.sh                              # everything, results in $OUT
#   GPU_CHECK_STEPS="install pytest" scripts/gpu-check.sh   # only these steps
#
# Results: $OUT (default ./gpu-check-out): gpu-summary.md, gpu-results.json (for
# `bench/gpu_report.py --from-results ... --write-docs`), gpu-bench.md, gpu-bench.json,
# gpu-check.log (this console) and gpu-logs.tar.gz (every step's full log and JUnit XML).
# Work files: build/gpu-check/ (GPU_CHECK_WORK), build/gpu-*. A failing step does not stop the
# later ones; the exit status is non-zero when any step failed. The run stays within
# GPU_CHECK_BUDGET seconds (default 510): a step that cannot start in time is reported as not run.
#
# Environment: OUT, PYTHON (default python3), JOBS (default: all cores), GPU_CHECK_BUDGET,
# GPU_CHECK_STEPS (facts install cpp ctest-cuda ctest-rest example pytest bench sanitizer),
# GTEST_DIR (GoogleTest sources where no GTest package is installed; default .gtest),
# BENCH_ARGS (extra arguments of bench/gpu_interop.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
SELF=$ROOT/scripts/gpu-check.sh

export OUT=${OUT:-$ROOT/gpu-check-out}
export WORK=${GPU_CHECK_WORK:-$ROOT/build/gpu-check}
export PYTHON=${PYTHON:-python3}
export JOBS=${JOBS:-$(nproc)}
export GTEST_DIR=${GTEST_DIR:-$ROOT/.gtest}
export BENCH_ARGS=${BENCH_ARGS:-}
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
export PYTHONUNBUFFERED=1
export CPP_BUILD=$ROOT/build/gpu-cpp
export PREFIX=$WORK/install
export EXT_BUILD=$ROOT/build/gpu-add_extension
BUDGET=${GPU_CHECK_BUDGET:-510}
ALL_STEPS="facts install cpp ctest-cuda ctest-rest example pytest bench sanitizer"
STEPS=${GPU_CHECK_STEPS:-$ALL_STEPS}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 && export CUDACXX=${CUDACXX:-$(command -v nvcc)}

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
             "scikit-build-core", "pytest", "hypothesis"):
    try:
        libs.append(f"{name} {version(name)}")
    except Exception:  # noqa: BLE001
        pass
print(f"Python {platform.python_version()} ({sys.executable}): " + ", ".join(libs))
EOF
  cat "$WORK/facts.txt"
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

step_cpp() {
  local tests=ON gtest=()
  if [ -f "$GTEST_DIR/CMakeLists.txt" ]; then
    gtest=(-DCAI_GTEST_SOURCE_DIR="$(cd "$GTEST_DIR" && pwd)")
    note "GoogleTest from $GTEST_DIR"
  fi
  local cfg=(-S . -B "$CPP_BUILD" "$(generator)" -DCMAKE_BUILD_TYPE=Release
    -DCAI_BUILD_BENCH=OFF -DCAI_INSTALL=ON -DCMAKE_INSTALL_PREFIX="$PREFIX"
    -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  if ! cmake "${cfg[@]}" -DCAI_BUILD_TESTS=ON "${gtest[@]}"; then
    note "configure with tests failed (no GoogleTest? carry its sources in .gtest/):" \
      "built without tests, ctest not run"
    rm -rf "$CPP_BUILD"
    tests=OFF
    cmake "${cfg[@]}" -DCAI_BUILD_TESTS=OFF || return 1
  fi
  cmake --build "$CPP_BUILD" -j "$JOBS" || return 1
  cmake --install "$CPP_BUILD" || return 1
  [ $tests = ON ] || echo "built and installed without the test suites"
}

run_ctest() {  # junit-file ctest-arguments...
  local junit=$1
  shift
  grep -q "CAI_BUILD_TESTS:BOOL=ON" "$CPP_BUILD/CMakeCache.txt" 2>/dev/null &&
    [ -f "$CPP_BUILD/CTestTestfile.cmake" ] ||
    skip "not run: the C++ suites were not built (see cpp)"
  ctest --test-dir "$CPP_BUILD" -j "$JOBS" --output-on-failure --timeout 120 --no-tests=error \
    --output-junit "$WORK/$junit" "$@"
}

step_ctest_cuda() {
  # The CUDA group: the backend's tests against the driver and nvcc's compile check.
  CAI_BACKEND=cuda run_ctest ctest-cuda.xml -R '^cuda' || return 1
  grep -q '<testcase' "$WORK/ctest-cuda.xml" || { note "no test named cuda*"; return 1; }
}

step_ctest_rest() {
  run_ctest ctest-rest.xml -E '^cuda'
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
  ls "$EXT_BUILD"/_add_ext* >/dev/null 2>&1 || { note "built, but no _add_ext module"; return 1; }
  need_cuda_backend
  (cd /tmp && CAI_BACKEND=cuda PYTHONPATH="$EXT_BUILD" "$PYTHON" -c "
import numpy as np, cai, _add_ext
a = cai.to_device(np.arange(8, dtype=np.float32))
out = cai.device_array(8, dtype=np.float32)
_add_ext.add(a, a, out)
assert (out.copy_to_host() == 2 * np.arange(8)).all()
print('_add_ext.add ok')")
}

# A peer library may abort the interpreter inside its own code (a C++ CHECK, std::terminate):
# tests/gpu/crash_safe_pytest.py makes that cost the one test, reported as failed by name.
step_pytest() {
  need_cuda_backend
  local args=(-v -rfEs -p no:cacheprovider)
  "$PYTHON" -c "import pytest_timeout" 2>/dev/null && args+=(--timeout=300)
  if ls "$EXT_BUILD"/_add_ext* >/dev/null 2>&1; then
    export CAI_ADD_EXT_DIR=$EXT_BUILD
  else
    note "no example extension: its tests skip"
  fi
  CAI_BACKEND=cuda "$PYTHON" tests/gpu/crash_safe_pytest.py --junitxml="$WORK/pytest-gpu.xml" \
    -- "${args[@]}" tests/gpu
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
  return $rc
}

if [ "${1:-}" = "--step" ]; then
  STEP=$2
  fn=step_${STEP//-/_}
  declare -F "$fn" >/dev/null || { echo "gpu-check.sh: no step $STEP" >&2; exit 2; }
  set -x
  "$fn"
  exit $?
fi

# ----- the run ----------------------------------------------------------------------------------

record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$WORK/steps.tsv"; }
selected() { [[ " $STEPS " == *" $1 "* ]]; }

run_step() {  # name max-seconds min-seconds [junit-file]
  local name=$1 max=$2 min=$3 junit=${4:-} left limit t0 rc dt status note=""
  if ! selected "$name"; then
    record "$name" skip 0 "not selected (GPU_CHECK_STEPS)" ""
    return
  fi
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt "$min" ]; then
    record "$name" skip 0 "not run: ${left}s left of the ${BUDGET}s budget" ""
    echo "== $name: not run (${left}s left of the budget)"
    return
  fi
  limit=$((max < left ? max : left))
  echo "== $name (at most ${limit}s)"
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
    "steps: $STEPS"
  run_step facts 60 0
  # The Python package and the C++ suites build at the same time (two builds of -j JOBS).
  run_step cpp 300 60 &
  local cpp_job=$!
  run_step install 300 60
  wait $cpp_job
  run_step ctest-cuda 120 20 ctest-cuda.xml
  run_step ctest-rest 90 20 ctest-rest.xml
  run_step example 120 30
  run_step pytest 240 40 pytest-gpu.xml
  run_step bench 180 40
  run_step sanitizer 180 40

  echo "== summary"
  if ! "$PYTHON" bench/gpu_report.py --steps "$WORK/steps.tsv" --facts "$WORK/facts.txt" \
    --bench "$WORK/gpu-bench.json" --commit "$COMMIT" --summary "$OUT/gpu-summary.md" \
    --json "$OUT/gpu-results.json"; then
    {
      echo "# GPU check (bench/gpu_report.py failed; the raw steps)"
      echo
      cat "$WORK/steps.tsv"
    } >"$OUT/gpu-summary.md"
    cat "$OUT/gpu-summary.md"
  fi
  local f failed
  for f in gpu-bench.json gpu-bench.md; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
  (cd "$WORK" && find . -maxdepth 2 \( -name '*.xml' -o -name '*.log' -o -name '*.txt' \
    -o -name '*.tsv' -o -path './notes/*' \) -print0 | tar -czf "$OUT/gpu-logs.tar.gz" --null -T -)
  failed=$(awk -F'\t' '$2 == "fail" {print $1}' "$WORK/steps.tsv" | paste -sd' ')
  if [ -n "$failed" ]; then
    echo "gpu-check: FAILED: $failed; results in $OUT"
    return 1
  fi
  echo "gpu-check: all steps passed or skipped; results in $OUT"
}

rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/notes" "$OUT"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
main 2>&1 | tee "$OUT/gpu-check.log"
exit "${PIPESTATUS[0]}"
