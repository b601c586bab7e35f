// CudaDevice: the Device of a CUDA GPU, through the CUDA runtime loaded at run time (dlopen), so that
// chute has no link-time dependency on CUDA and runs its CPU path where there is none.
//   - host memory: cudaHostAlloc(portable), allocated once per ring slot;
//   - device memory: cudaMalloc, allocated once per device slot (a fixed ring: nothing for
//     cudaMallocAsync's pool to save);
//   - copies: cudaMemcpyAsync on a stream of chute's own, created non-blocking so that it never
//     serialises with the legacy default stream;
//   - the consumer's stream is a raw cudaStream_t (torch.cuda.current_stream().cuda_stream).
// Every call makes the device's primary context current for its duration (cuCtxPushCurrent) and pops it
// after, so the caller's current device and context never change under them, and no other GPU's context
// is ever created (cudaSetDevice(0) to "restore" a fresh thread would create GPU 0's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chute/gpu/device.h"

namespace chute {

// Whether CUDA is usable here: libcudart loads and sees at least one GPU. The message says why not.
struct CudaAvailability {
  bool available = false;
  int device_count = 0;
  std::string message;
};
CudaAvailability cuda_availability();

// libcudart: the one already loaded in the process (torch's) if any, else $CHUTE_CUDART, else these
// candidates (Python names the ones next to torch), else libcudart.so.13, .so.12, .so; retried after a
// failure. loaded_cudart_paths(): every libcudart mapped into the process now (there should be one).
void set_cudart_candidates(std::vector<std::string> paths);
std::vector<std::string> loaded_cudart_paths();

// Fails with "device='cuda' needs libcudart / a CUDA GPU: <reason>" when there is none.
Result<std::shared_ptr<Device>> open_cuda_device(int index);

namespace detail {
struct CudartApi;
// The CUDA Device over a given table (open_cuda_device() passes cudart()'s; tests pass a recording fake).
Result<std::shared_ptr<Device>> open_cuda_device_with(const CudartApi* api, int index);
}  // namespace detail

// The PCI bus id of GPU `index` ("0000:3b:00.0"), for numa.h; empty when unknown.
std::string cuda_pci_bus_id(int index);

}  // namespace chute
