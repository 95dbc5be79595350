# gpu/check_dry_run.cmake: the gpu_mma_probe_dry_run test. Runs fb-mma-probe --dry-run (no
# GPU: inputs only, D = 0xffffffff) and then the test_probe_file case that checks the file
# it wrote (forms, batches, special inputs, designed batches including overflow, f_boundary,
# chained, signed_zeros, zero_exponent and inf_overflow, in exact arithmetic; probe-check's --mismatches-out/--sample-out/--jobs on it
# with D filled in from the emu; tests/test_probe_file.cpp). Also: the same seed writes the
# same bytes again (the file is a reproducible input set), and no FILE.partial is left.
# Usage: cmake -DPROBE=fb-mma-probe -DCHECKER=test_probe_file -DOUT=file.fbp -P check_dry_run.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE ${OUT} ${OUT}.again)
execute_process(COMMAND ${PROBE} --dry-run --tiles 2 --seed 3 --out ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fb-mma-probe --dry-run failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${PROBE} --dry-run --tiles 2 --seed 3 --out ${OUT}.again RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fb-mma-probe --dry-run (second run) failed (${rc}):\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${OUT}.again RESULT_VARIABLE differ)
file(REMOVE ${OUT}.again)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "fb-mma-probe --dry-run --seed 3 wrote different files on two runs")
endif()
if(EXISTS ${OUT}.partial)
  message(FATAL_ERROR "fb-mma-probe left ${OUT}.partial behind")
endif()
set(ENV{FB_PROBE_DRY_RUN_FILE} ${OUT})
execute_process(COMMAND ${CHECKER} --test-case=probe_mma_dry_run_file --no-skip RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the dry-run probe file failed its checks")
endif()
string(FIND "${out}" "1 passed" ran)
if(ran EQUAL -1)
  message(FATAL_ERROR "test case probe_mma_dry_run_file did not run")
endif()
