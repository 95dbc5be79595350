# gpu/check_ptx.cmake: the gpu_ptx test. Fails unless each PTX listing built by
# gpu/CMakeLists.txt contains the instructions its kernels must use (and, for entries
# starting with "!", does not contain an instruction it must not use).
# Usage: cmake -DPTX_DIR=<build>/gpu -P check_ptx.cmake
set(expectations
  "mma_probe_sm_90a.ptx|wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16"
  "mma_probe_sm_90a.ptx|wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
  "mma_probe_sm_90a.ptx|wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3"
  "mma_probe_sm_90a.ptx|wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2"
  "mma_probe_sm_90a.ptx|wgmma.fence.sync.aligned"
  "mma_probe_sm_80.ptx|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  "mma_probe_sm_80.ptx|mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
  "mma_probe_sm_80.ptx|mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
  "mma_probe_sm_80.ptx|mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
  "sfu_probe_sm_80.ptx|ex2.approx.ftz.f32"
  "sfu_probe_sm_80.ptx|rcp.approx.ftz.f32"
  "sfu_probe_sm_80.ptx|lg2.approx.ftz.f32"
  "fa2_sm_80.ptx|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  "fa2_sm_80.ptx|ex2.approx.ftz.f32"
  "fa2_sm_80.ptx|rcp.approx.ftz.f32"
  "fa2_sm_80.ptx|lg2.approx.ftz.f32"
  "!fa2_sm_80.ptx|ex2.approx.f32"
  "!fa2_sm_80.ptx|div.rn.f32")
set(failed 0)
foreach(item ${expectations})
  string(REPLACE "|" ";" parts "${item}")
  list(GET parts 0 file)
  list(GET parts 1 needle)
  set(must_be_absent OFF)
  if(file MATCHES "^!")
    string(SUBSTRING "${file}" 1 -1 file)
    set(must_be_absent ON)
  endif()
  if(NOT EXISTS ${PTX_DIR}/${file})
    message(SEND_ERROR "gpu_ptx: ${PTX_DIR}/${file} is missing (build target fb_gpu_ptx)")
    set(failed 1)
    continue()
  endif()
  file(READ ${PTX_DIR}/${file} text)
  string(FIND "${text}" "${needle}" at)
  if(must_be_absent)
    if(NOT at EQUAL -1)
      message(SEND_ERROR "gpu_ptx: ${file} contains '${needle}', which it must not use")
      set(failed 1)
    else()
      message(STATUS "gpu_ptx: ${file} does not contain '${needle}'")
    endif()
  elseif(at EQUAL -1)
    message(SEND_ERROR "gpu_ptx: ${file} does not contain '${needle}'")
    set(failed 1)
  else()
    message(STATUS "gpu_ptx: ${file} contains '${needle}'")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "gpu_ptx: required instructions missing")
endif()
