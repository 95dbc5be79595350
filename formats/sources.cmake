# formats/sources.cmake: the sources of fb_formats, named once for both builds that make it:
# the project's (formats/CMakeLists.txt) and gpu/'s standalone one on a device machine
# (gpu/CMakeLists.txt). Two lists drifted: the standalone one lacked decimal_text.cpp, which
# traces/probe_file.cpp came to need, and fb-mma-probe no longer linked there.
set(FB_FORMATS_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/format.cpp
    ${CMAKE_CURRENT_LIST_DIR}/file_read.cpp
    ${CMAKE_CURRENT_LIST_DIR}/text_escape.cpp
    ${CMAKE_CURRENT_LIST_DIR}/decimal_text.cpp)
