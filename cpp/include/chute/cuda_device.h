// CudaDevice: the Device of a CUDA GPU, through the CUDA runtime loaded at run time (dlopen), so that
// chute has no link-time dependency on CUDA and runs its CPU path where there is none.
//   - host memory: cudaHostAlloc(portable), allocated once per ring slot;
//   - device memory: cudaMalloc, allocated once per device slot (a fixed ring: nothing for
//     cudaMallocAsync's pool to save);
//   - copies: cudaMemcpyAsync on a stream of chute's own, created non-blocking so that it never
//     serialises with the legacy default stream;
//   - the consumer's stream is a raw cudaStream_t (torch.cuda.current_stream().cuda_stream).
// Every call sets the device for its duration and restores the caller's, so the user's current device
// never changes under them.
#pragma once

#include <memory>
#include <string>

#include "chute/device.h"

namespace chute {

// Whether CUDA is usable here: libcudart loads and sees at least one GPU. The message says why not.
struct CudaAvailability {
  bool available = false;
  int device_count = 0;
  std::string message;
};
CudaAvailability cuda_availability();

// Fails with "device='cuda' needs libcudart / a CUDA GPU: <reason>" when there is none.
Result<std::shared_ptr<Device>> open_cuda_device(int index);

// The PCI bus id of GPU `index` ("0000:3b:00.0"), for numa.h; empty when unknown.
std::string cuda_pci_bus_id(int index);

}  // namespace chute
