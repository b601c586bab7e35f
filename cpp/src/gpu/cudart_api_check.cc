// Compile-time check, built only where the CUDA toolkit's headers are found: the declarations chute
// writes itself in detail/cudart_api.h (to dlopen libcudart without the toolkit) have the real runtime
// API's signatures and constants. Enums count as int and pointers to the runtime's opaque structs as
// void*, which is how they are passed (x86-64 and aarch64 ABIs). Nothing here runs.
#include <cuda.h>  // the driver functions (ContextGuard); its macros give the _v2 names on both sides
#include <cuda_runtime_api.h>

#include <type_traits>

// Flags are macros in driver_types.h: take their values, then let detail/cudart_api.h use the names.
constexpr unsigned kRealHostAllocPortable = cudaHostAllocPortable;
constexpr unsigned kRealHostRegisterPortable = cudaHostRegisterPortable;
constexpr unsigned kRealStreamNonBlocking = cudaStreamNonBlocking;
constexpr unsigned kRealEventDisableTiming = cudaEventDisableTiming;
#undef cudaHostAllocPortable
#undef cudaHostRegisterPortable
#undef cudaStreamNonBlocking
#undef cudaEventDisableTiming

#include "base/detail/signature_check.h"
#include "gpu/detail/cudart_api.h"

namespace {
namespace d = chute::detail;
using chute::detail::abi::sig_t;

#define CHUTE_CHECK_SIGNATURE(name)                                                            \
  static_assert(std::is_same_v<sig_t<decltype(&::name)>, sig_t<decltype(d::CudartApi::name)>>, \
                "detail/cudart_api.h: " #name " differs from cuda_runtime_api.h")

CHUTE_CHECK_SIGNATURE(cudaGetErrorString);
CHUTE_CHECK_SIGNATURE(cudaGetDeviceCount);
CHUTE_CHECK_SIGNATURE(cudaGetDevice);
CHUTE_CHECK_SIGNATURE(cudaSetDevice);
CHUTE_CHECK_SIGNATURE(cudaDeviceGetPCIBusId);
CHUTE_CHECK_SIGNATURE(cudaHostAlloc);
CHUTE_CHECK_SIGNATURE(cudaFreeHost);
CHUTE_CHECK_SIGNATURE(cudaHostRegister);
CHUTE_CHECK_SIGNATURE(cudaHostUnregister);
CHUTE_CHECK_SIGNATURE(cudaMalloc);
CHUTE_CHECK_SIGNATURE(cudaFree);
CHUTE_CHECK_SIGNATURE(cudaStreamCreateWithFlags);
CHUTE_CHECK_SIGNATURE(cudaStreamDestroy);
CHUTE_CHECK_SIGNATURE(cudaStreamSynchronize);
CHUTE_CHECK_SIGNATURE(cudaStreamWaitEvent);
CHUTE_CHECK_SIGNATURE(cudaEventCreateWithFlags);
CHUTE_CHECK_SIGNATURE(cudaEventDestroy);
CHUTE_CHECK_SIGNATURE(cudaEventRecord);
CHUTE_CHECK_SIGNATURE(cudaEventQuery);
CHUTE_CHECK_SIGNATURE(cudaEventSynchronize);
CHUTE_CHECK_SIGNATURE(cudaMemcpyAsync);
CHUTE_CHECK_SIGNATURE(cudaMemcpy);
CHUTE_CHECK_SIGNATURE(cuInit);
CHUTE_CHECK_SIGNATURE(cuDeviceGet);
CHUTE_CHECK_SIGNATURE(cuDevicePrimaryCtxRetain);
CHUTE_CHECK_SIGNATURE(cuDevicePrimaryCtxRelease);
CHUTE_CHECK_SIGNATURE(cuCtxPushCurrent);
CHUTE_CHECK_SIGNATURE(cuCtxPopCurrent);

static_assert(sizeof(cudaError_t) == sizeof(d::cudaError_t) && sizeof(cudaMemcpyKind) == sizeof(int));
static_assert(::cudaSuccess == d::cudaSuccess);
static_assert(::cudaErrorNotReady == d::cudaErrorNotReady);
static_assert(::cudaErrorCudartUnloading == d::cudaErrorCudartUnloading);
static_assert(kRealHostAllocPortable == d::cudaHostAllocPortable);
static_assert(kRealHostRegisterPortable == d::cudaHostRegisterPortable);
static_assert(kRealStreamNonBlocking == d::cudaStreamNonBlocking);
static_assert(kRealEventDisableTiming == d::cudaEventDisableTiming);
static_assert(::cudaMemcpyHostToDevice == d::cudaMemcpyHostToDevice);
static_assert(::cudaMemcpyDeviceToHost == d::cudaMemcpyDeviceToHost);

}  // namespace
