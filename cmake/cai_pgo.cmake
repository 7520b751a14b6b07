# Profile-guided optimization of the per-call paths (docs/benchmarks.md, "part four").
#
# A call like cai.from_dlpack(p) runs code spread over some 50 functions whose error checks and
# rare roads sit between the instructions that run, so the call touches more 64-byte lines of
# code than a first-level instruction cache holds. With a profile, GCC moves the code a training
# run never reached out of the way and places the hot functions together.
#
# CAI_PGO=ON (the wheel's default): before the targets are compiled, configure time builds an
# instrumented copy of _cai and the simulated driver in <build>/pgo/build, runs
# bench/pgo_train.py with it (every cai statement of bench/interop.py, over the simulated
# driver), and keeps the counts in <build>/pgo/profile; every target is then compiled with them.
# The profile is made once per build folder: delete <build>/pgo to make it again. If any step
# fails, the build goes on without a profile and says why. GCC only (clang's profiles are made
# differently), Release only. CAI_PGO=OFF builds without; GENERATE is the instrumented copy.
if(SKBUILD)
  set(_cai_pgo_default ON)
else()
  set(_cai_pgo_default OFF)
endif()
set(CAI_PGO ${_cai_pgo_default} CACHE STRING
    "Profile-guided optimization of the per-call paths: ON, OFF (GENERATE: internal)")

# Object files name their counts by their path below the build folder, so that the counts of
# the instrumented copy are found by the same object in this build.
set(_cai_pgo_prefix -fprofile-prefix-path=${CMAKE_BINARY_DIR})

function(_cai_pgo_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(LENGTH "${out}" n)
    if(n GREATER 3000)
      math(EXPR start "${n} - 3000")
      string(SUBSTRING "${out}" ${start} 3000 out)
    endif()
    set(_cai_pgo_failed "${what} failed (${rc}):\n${out}" PARENT_SCOPE)
  endif()
endfunction()

function(_cai_pgo_train dir)
  find_package(Python 3.10 COMPONENTS Interpreter Development.Module REQUIRED)
  set(args -DCMAKE_BUILD_TYPE=Release -DCAI_PGO=GENERATE -DCAI_PGO_DIR=${dir}/profile
      -DCAI_BUILD_PYTHON=ON -DCAI_BUILD_TESTS=OFF -DCAI_INSTALL=OFF -DCAI_ENABLE_CUDA=OFF
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}"
      -DPython_EXECUTABLE=${Python_EXECUTABLE})
  foreach(var CMAKE_MAKE_PROGRAM CMAKE_CXX_COMPILER_LAUNCHER nanobind_DIR)
    if(${var})
      list(APPEND args -D${var}=${${var}})
    endif()
  endforeach()
  set(_cai_pgo_failed "")
  _cai_pgo_step("configuring the instrumented build"
    ${CMAKE_COMMAND} -S ${PROJECT_SOURCE_DIR} -B ${dir}/build -G ${CMAKE_GENERATOR} ${args})
  if(NOT _cai_pgo_failed)
    _cai_pgo_step("building the instrumented _cai"
      ${CMAKE_COMMAND} --build ${dir}/build --target _cai cai_sim_driver)
  endif()
  if(NOT _cai_pgo_failed)
    # The package as the training imports it: python/cai with the instrumented module inside.
    file(REMOVE_RECURSE ${dir}/site ${dir}/profile)
    file(COPY ${PROJECT_SOURCE_DIR}/python/cai DESTINATION ${dir}/site)
    file(GLOB module ${dir}/build/python/_cai/_cai*${CMAKE_SHARED_MODULE_SUFFIX})
    file(COPY ${module} DESTINATION ${dir}/site/cai)
    _cai_pgo_step("the training run (bench/pgo_train.py)"
      ${CMAKE_COMMAND} -E env PYTHONPATH=${dir}/site CAI_BACKEND=sim
      CAI_SIM_DRIVER=${dir}/build/sim_driver/libcuda.so.1
      ${Python_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/pgo_train.py)
  endif()
  if(_cai_pgo_failed)
    message(WARNING "cai: built without profile-guided optimization: ${_cai_pgo_failed}")
    file(REMOVE_RECURSE ${dir}/profile)
  else()
    file(TOUCH ${dir}/profile/trained)
  endif()
endfunction()

if(CAI_PGO STREQUAL "GENERATE")
  # The simulated driver runs kernels on several threads: counters updated without atomics lose
  # increments, and GCC refuses such counts as corrupted when it reads them (seen in CI).
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fprofile-generate=${CAI_PGO_DIR};${_cai_pgo_prefix};-fprofile-update=atomic>")
  add_link_options(-fprofile-generate=${CAI_PGO_DIR})
elseif(CAI_PGO)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    message(STATUS "cai: no profile-guided optimization (the build runs GCC's profiles only)")
  elseif(NOT CMAKE_BUILD_TYPE STREQUAL "Release" OR NOT CAI_BUILD_PYTHON)
    message(STATUS "cai: no profile-guided optimization (Release builds of _cai only)")
  else()
    set(_dir ${CMAKE_BINARY_DIR}/pgo)
    if(NOT EXISTS ${_dir}/profile/trained)
      message(STATUS "cai: training the profile-guided build (an instrumented _cai in ${_dir})")
      _cai_pgo_train(${_dir})
    endif()
    if(EXISTS ${_dir}/profile/trained)
      message(STATUS "cai: profile-guided optimization with the counts in ${_dir}/profile")
      set(CAI_PGO_USED ON)
      # Code the training never ran is optimized as without a profile (partial training), and a
      # function edited since the training is compiled without its counts (coverage-mismatch).
      # Counts that still disagree (a profile made before the counters were atomic) are smoothed
      # rather than refused (profile-correction).
      add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fprofile-use=${_dir}/profile;${_cai_pgo_prefix};-fprofile-partial-training;-fprofile-correction;-Wno-missing-profile;-Wno-coverage-mismatch>")
    endif()
  endif()
endif()
