// gpu/sfu_dump.cu: fb-sfu-dump, one special function's output for every fp32 input.
//
// Contract: evaluates the named PTX instruction (ex2 = ex2.approx.ftz.f32, ex2nf =
// ex2.approx.f32, rcp = rcp.approx.ftz.f32, lg2 = lg2.approx.ftz.f32) on all 2^32 input bit
// patterns and writes an FBSFUDUMP1 file (traces/sfu_dump.hpp): a 4096-byte NUL-padded
// text header, then the 2^32 output bit patterns as little-endian u32 in input order
// (16 GiB). Meant for the device machine only (gpu/device_replay.sh writes the dumps to
// /dev/shm, replays the hardware traces with them, and deletes them): the dump is how a
// replay is checked with the hardware's own SFU outputs before a model of the SFU exists.
// Usage: fb-sfu-dump --function ex2|ex2nf|rcp|lg2 --out FILE   (exit 2 bad usage, 3 CUDA error)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/device_common.cuh"

namespace fb::gpu {
namespace {

enum Fn : int { kEx2, kEx2NoFtz, kRcp, kLg2 };

__global__ void evaluate_kernel(int fn, std::uint64_t base, std::uint64_t count, std::uint32_t* out) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(static_cast<std::uint32_t>(base + i));
    const float y = fn == kEx2        ? ex2_approx_ftz(x)
                    : fn == kEx2NoFtz ? ex2_approx(x)
                    : fn == kRcp      ? rcp_approx_ftz(x)
                                      : lg2_approx_ftz(x);
    out[i] = __float_as_uint(y);
  }
}

int run(int argc, char** argv) {
  std::string function, out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--function" && i + 1 < argc)
      function = argv[++i];
    else if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else {
      std::fprintf(stderr, "usage: fb-sfu-dump --function ex2|ex2nf|rcp|lg2 --out FILE\n");
      return 2;
    }
  }
  const char* const names[] = {"ex2", "ex2nf", "rcp", "lg2"};
  const char* const ptx[] = {"ex2.approx.ftz.f32", "ex2.approx.f32", "rcp.approx.ftz.f32", "lg2.approx.ftz.f32"};
  int fn = -1;
  for (int f = 0; f < 4; ++f)
    if (function == names[f]) fn = f;
  if (fn < 0 || out.empty()) {
    std::fprintf(stderr, "error: --function must be ex2, ex2nf, rcp or lg2 and --out FILE is required\n");
    return 2;
  }
  FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "error: %s: cannot open for writing\n", out.c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  int device = 0, driver = 0, runtime = 0;
  FB_CUDA_CHECK(cudaGetDevice(&device));
  FB_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  FB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::vector<char> header(4096, '\0');
  // The emu names the non-ftz form's function ex2 as well: it is an ex2 model.
  std::snprintf(header.data(), header.size(),
                "FBSFUDUMP1\nfunction=%s\ninstruction=%s\nsource=cuda:%s\ndevice=%s\ncompute_capability=%d.%d\n"
                "driver=%d\ncuda_runtime=%d\nprogram=fb-sfu-dump\n",
                fn == kEx2NoFtz ? "ex2" : names[fn], ptx[fn], prop.name, prop.name, prop.major, prop.minor, driver,
                runtime);
  const std::uint64_t chunk = std::uint64_t{1} << 28;
  std::uint32_t* d_out;
  FB_CUDA_CHECK(cudaMalloc(&d_out, chunk * 4));
  std::vector<std::uint32_t> host(chunk);
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (std::uint64_t base = 0; ok && base < (std::uint64_t{1} << 32); base += chunk) {
    evaluate_kernel<<<4096, 256>>>(fn, base, chunk, d_out);
    FB_CUDA_CHECK(cudaGetLastError());
    FB_CUDA_CHECK(cudaMemcpy(host.data(), d_out, chunk * 4, cudaMemcpyDeviceToHost));
    ok = std::fwrite(host.data(), 4, chunk, f) == chunk;
  }
  FB_CUDA_CHECK(cudaFree(d_out));
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "error: %s: write failed (disk full?)\n", out.c_str());
    std::remove(out.c_str());
    return 2;
  }
  std::printf("wrote %s (%s on %s, 2^32 outputs)\n", out.c_str(), ptx[fn], prop.name);
  return 0;
}

}  // namespace
}  // namespace fb::gpu

int main(int argc, char** argv) { return fb::gpu::run(argc, argv); }
