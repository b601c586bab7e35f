// The few CUDA runtime functions chute calls, declared here and resolved with dlopen/dlsym at run time, so
// that chute builds without the CUDA toolkit and its wheel imports on machines without CUDA. The
// signatures and constants are those of cuda_runtime_api.h / driver_types.h, stable across CUDA 11-13.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace chute::detail {

using cudaError_t = int;
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;

constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorCudartUnloading = 4;  // the process is exiting
constexpr cudaError_t cudaErrorNotReady = 600;
constexpr unsigned cudaHostAllocPortable = 0x01;
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

  std::string error(cudaError_t e) const { return std::string(cudaGetErrorString(e)) + " (" + std::to_string(e) + ")"; }
};

struct LoadedCudart {
  CudartApi api{};
  bool ok = false;
  std::string why;  // when !ok: every dlerror(), or the missing symbol
};
// Tries each library name in turn; never dlclose()s (the runtime lives as long as the process).
LoadedCudart load_cudart(const std::vector<std::string>& names);

// The process-wide table, loaded once (libcudart.so.13, .so.12, .so, or $CHUTE_CUDART); nullptr when
// libcudart cannot be loaded or lacks a symbol, with the reason in *why.
const CudartApi* cudart(std::string* why = nullptr);

}  // namespace chute::detail
