# traces/device_formats.cmake: the file formats gpu/'s CUDA programs read and write, plain C++
# on formats/ alone, so that they build both here (traces/CMakeLists.txt includes this file) and
# in gpu/'s standalone build on a device machine without the project's other dependencies
# (gpu/CMakeLists.txt includes it too). Paths are relative to this file.
set(FB_TRACES_DIR ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(FB_TRACES_ROOT ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
# FBPROBE1, the tensor-core probe file fb-mma-probe writes and `flashbits probe-check` reads.
add_library(fb_probe_file STATIC ${FB_TRACES_DIR}/probe_file.cpp)
target_include_directories(fb_probe_file PUBLIC ${FB_TRACES_ROOT})
target_link_libraries(fb_probe_file PUBLIC fb_formats)
# fb-fa2's host side without CUDA: command line, checks, metadata, dependency-free trace I/O
# (tests/test_fa2_host.cpp links it through fb_traces).
add_library(fb_fa2_host STATIC ${FB_TRACES_DIR}/fa2_host.cpp ${FB_TRACES_DIR}/fa2_trace_lite.cpp)
target_include_directories(fb_fa2_host PUBLIC ${FB_TRACES_ROOT})
target_link_libraries(fb_fa2_host PUBLIC fb_formats)  # read_file_capped
# The host side of writing FBSFUT1 tables (header, 4-bit deltas, escapes, summary lines): the one
# writer of fb-sfu-probe and fb-sfu-rehearse. No emu.
add_library(fb_sfu_capture_writer STATIC ${FB_TRACES_DIR}/sfu_capture_writer.cpp)
target_include_directories(fb_sfu_capture_writer PUBLIC ${FB_TRACES_ROOT})
