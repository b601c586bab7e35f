// The few CUDA runtime functions chute calls, declared here and resolved with dlopen/dlsym at run time, so
// that chute builds without the CUDA toolkit and its wheel imports on machines without CUDA. The
// signatures and constants are those of cuda_runtime_api.h / driver_types.h, stable across CUDA 11-13,
// plus five driver functions (cuda.h, libcuda.so.1) to make a device's primary context current for a call
// and restore exactly what the thread had, which cudaSetDevice cannot (cuda_device.cc, ContextGuard).
//
// One runtime per process: a second libcudart beside torch's has its own state, and with a cu12 torch on a
// machine that also has libcudart.so.13 chute used to load that one. cudart() takes, in order: a libcudart
// already loaded in the process (torch's, found by dl_iterate_phdr), $CHUTE_CUDART, the candidates Python
// names (the one next to torch: site-packages/nvidia/*/lib, torch/lib), then libcudart.so.13, .so.12, .so.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/detail/dynamic_library.h"

namespace chute::detail {

using cudaError_t = int;
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;

constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorCudartUnloading = 4;  // the process is exiting
constexpr cudaError_t cudaErrorNotReady = 600;
constexpr unsigned cudaHostAllocPortable = 0x01;
constexpr unsigned cudaHostRegisterPortable = 0x01;
constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDisableTiming = 0x02;
constexpr int cudaMemcpyHostToDevice = 1;
constexpr int cudaMemcpyDeviceToHost = 2;

struct CudartApi {
  const char* (*cudaGetErrorString)(cudaError_t);
  cudaError_t (*cudaGetDeviceCount)(int*);
  cudaError_t (*cudaGetDevice)(int*);
  cudaError_t (*cudaSetDevice)(int);
  cudaError_t (*cudaDeviceGetPCIBusId)(char*, int, int);
  cudaError_t (*cudaHostAlloc)(void**, size_t, unsigned);
  cudaError_t (*cudaFreeHost)(void*);
  cudaError_t (*cudaHostRegister)(void*, size_t, unsigned);
  cudaError_t (*cudaHostUnregister)(void*);
  cudaError_t (*cudaMalloc)(void**, size_t);
  cudaError_t (*cudaFree)(void*);
  cudaError_t (*cudaStreamCreateWithFlags)(cudaStream_t*, unsigned);
  cudaError_t (*cudaStreamDestroy)(cudaStream_t);
  cudaError_t (*cudaStreamSynchronize)(cudaStream_t);
  cudaError_t (*cudaStreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
  cudaError_t (*cudaEventCreateWithFlags)(cudaEvent_t*, unsigned);
  cudaError_t (*cudaEventDestroy)(cudaEvent_t);
  cudaError_t (*cudaEventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*cudaEventQuery)(cudaEvent_t);
  cudaError_t (*cudaEventSynchronize)(cudaEvent_t);
  cudaError_t (*cudaMemcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
  cudaError_t (*cudaMemcpy)(void*, const void*, size_t, int);
  // libcuda.so.1 (cuda.h maps the last three names to their _v2 symbols, which are the ones loaded).
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);

  std::string error(cudaError_t e) const { return std::string(cudaGetErrorString(e)) + " (" + std::to_string(e) + ")"; }
};

// When !ok, `why` holds every dlerror(), or the missing symbol.
using LoadedCudart = LoadedApi<CudartApi>;
// Tries each library name in turn, then the driver (libcuda.so.1); never dlclose()s (the runtime lives as
// long as the process).
LoadedCudart load_cudart(const std::vector<std::string>& names);

// The paths of every libcudart mapped into this process now (dl_iterate_phdr), in load order.
std::vector<std::string> loaded_cudart_paths();
// The order described at the top: a loaded runtime if any, else $CHUTE_CUDART, `candidates`, the sonames.
LoadedCudart find_cudart(const std::vector<std::string>& candidates);
// Python's candidates (next to torch), tried after a loaded runtime and $CHUTE_CUDART.
void set_cudart_candidates(std::vector<std::string> paths);

// The process-wide table: the first successful find_cudart(), kept for the process; after a failure the
// next call tries again (a runtime loaded by torch since, a candidate set since). nullptr when none
// loads or one lacks a symbol, with the reason in *why.
const CudartApi* cudart(std::string* why = nullptr);

}  // namespace chute::detail
