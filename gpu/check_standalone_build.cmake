# gpu/check_standalone_build.cmake: the gpu_standalone_build test. Builds gpu/ as the device
# session builds it (cmake -S gpu, as gpu/prepare_session.sh and gpu/prepare_open_questions.sh
# do, libstdc++ linked statically), every target. That build lists its own libraries; when
# one lacked a source the project build has, only the device machine's preparation found out.
# Usage: cmake -DSOURCE=<repo>/gpu -DBINARY=<dir> -DNVCC=<nvcc> -P check_standalone_build.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${BINARY})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BINARY} -G Ninja -DCMAKE_BUILD_TYPE=Release
                        -DCMAKE_CUDA_COMPILER=${NVCC} "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake -S gpu (standalone) failed to configure (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY} -j 2 RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake -S gpu (standalone) failed to build (${rc}):\n${out}\n${err}")
endif()
foreach(program fb-mma-probe fb-sfu-probe fb-sfu-dump fb-fa2)
  if(NOT EXISTS ${BINARY}/${program})
    message(FATAL_ERROR "the standalone gpu/ build made no ${program}")
  endif()
endforeach()
file(REMOVE_RECURSE ${BINARY})
message(STATUS "gpu/ builds standalone: fb-mma-probe fb-sfu-probe fb-sfu-dump fb-fa2")
