# gpu/check_ptx.cmake: the gpu_ptx test. Fails unless each PTX listing built by
# gpu/CMakeLists.txt contains the instructions its kernels must use (and, for entries
# starting with "!", does not contain an instruction it must not use).
# An entry "FILE@KERNEL|NEEDLE" checks the body of every .entry whose mangled name contains
# KERNEL (both head-dim instantiations of a template, say): each must contain NEEDLE, and
# at least one such entry must exist, so a kernel that lost its MMA or its ex2 is caught
# even when another kernel in the same file still has one.
# Usage: cmake -DPTX_DIR=<build>/gpu -P check_ptx.cmake
cmake_minimum_required(VERSION 3.20)  # script mode: sets the policies while() and if() need
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
  "sfu_probe_sm_80.ptx|lg2.approx.ftz.f32")
# fb-fa2, for both targets: the forward (S, P.V by MMA; ex2, rcp, lg2), the backward's
# dK/dV and dQ kernels (S, dP, dV, dK, dQ by MMA; P recomputed with ex2), delta's FFMA.
foreach(ptx fa2_sm_80.ptx fa2_sm_90a.ptx)
  list(APPEND expectations
    "${ptx}@fa2_forward|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    "${ptx}@fa2_forward|ex2.approx.ftz.f32"
    "${ptx}@fa2_forward|rcp.approx.ftz.f32"
    "${ptx}@fa2_forward|lg2.approx.ftz.f32"
    "${ptx}@fa2_forward|cvt.rn.bf16x2.f32"
    "${ptx}@fa2_forward|shfl.sync.bfly.b32"
    "${ptx}@fa2_delta|fma.rn.f32"
    "${ptx}@fa2_delta|shfl.sync.bfly.b32"
    "${ptx}@fa2_backward_dkdv|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    "${ptx}@fa2_backward_dkdv|ex2.approx.ftz.f32"
    "${ptx}@fa2_backward_dkdv|cvt.rn.bf16x2.f32"
    "${ptx}@fa2_backward_dq|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    "${ptx}@fa2_backward_dq|ex2.approx.ftz.f32"
    "${ptx}@fa2_backward_dq|cvt.rn.bf16x2.f32"
    "!${ptx}|ex2.approx.f32"
    "!${ptx}|div.rn.f32")
endforeach()

# Sets ${out_count} to the number of .entry blocks in `text` whose name contains `kernel`
# and ${out_missing} to the number of those whose body lacks `needle`.
function(check_entries text kernel needle out_count out_missing)
  set(rest "${text}")
  set(count 0)
  set(missing 0)
  while(TRUE)
    string(FIND "${rest}" ".entry " at)
    if(at EQUAL -1)
      break()
    endif()
    math(EXPR start "${at} + 7")
    string(SUBSTRING "${rest}" ${start} -1 rest)
    string(FIND "${rest}" ".entry " next)
    if(next EQUAL -1)
      set(body "${rest}")
    else()
      string(SUBSTRING "${rest}" 0 ${next} body)
    endif()
    string(FIND "${body}" "(" paren)
    string(SUBSTRING "${body}" 0 ${paren} name)
    string(FIND "${name}" "${kernel}" named)
    if(NOT named EQUAL -1)
      math(EXPR count "${count} + 1")
      string(FIND "${body}" "${needle}" found)
      if(found EQUAL -1)
        math(EXPR missing "${missing} + 1")
        message(SEND_ERROR "gpu_ptx: entry ${name} does not contain '${needle}'")
      endif()
    endif()
  endwhile()
  set(${out_count} ${count} PARENT_SCOPE)
  set(${out_missing} ${missing} PARENT_SCOPE)
endfunction()

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
  set(kernel "")
  if(file MATCHES "@")
    string(REPLACE "@" ";" file_parts "${file}")
    list(GET file_parts 0 file)
    list(GET file_parts 1 kernel)
  endif()
  if(NOT EXISTS ${PTX_DIR}/${file})
    message(SEND_ERROR "gpu_ptx: ${PTX_DIR}/${file} is missing (build target fb_gpu_ptx)")
    set(failed 1)
    continue()
  endif()
  file(READ ${PTX_DIR}/${file} text)
  if(NOT kernel STREQUAL "")
    check_entries("${text}" "${kernel}" "${needle}" count missing)
    if(count EQUAL 0)
      message(SEND_ERROR "gpu_ptx: ${file} has no .entry named like '${kernel}'")
      set(failed 1)
    elseif(missing GREATER 0)
      set(failed 1)
    else()
      message(STATUS "gpu_ptx: ${file}: all ${count} '${kernel}' entries contain '${needle}'")
    endif()
    continue()
  endif()
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
