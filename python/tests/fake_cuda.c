/* A stand-in CUDA (runtime and driver) for test_device.py: built twice, as libcudart.so.12 (what a cu12
 * torch would have loaded) and as libcuda.so.1. It records device selections and primary-context retains
 * in $FAKE_CUDA_LOG, one line each, and keeps the driver's per-thread context stack, so a test can check
 * which GPUs chute touched, from which threads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void note(const char* what, int value) {
  const char* path = getenv("FAKE_CUDA_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%s %d\n", what, value);
  fclose(f);
}

static __thread void* contexts[16];
static __thread int depth;

const char* fake_cuda_name(void) { return FAKE_NAME; }

/* runtime */
const char* cudaGetErrorString(int e) { (void)e; return "fake cuda error"; }
int cudaGetDeviceCount(int* n) { *n = 2; return 0; }
int cudaGetDevice(int* d) { *d = 0; return 0; }
int cudaSetDevice(int d) { note("cudaSetDevice", d); return 0; }
int cudaDeviceGetPCIBusId(char* id, int len, int d) { snprintf(id, len, "0000:%02x:00.0", d); return 0; }
int cudaHostAlloc(void** p, size_t n, unsigned f) { (void)f; *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096); return *p ? 0 : 2; }
int cudaFreeHost(void* p) { free(p); return 0; }
int cudaHostRegister(void* p, size_t n, unsigned f) { (void)p; (void)n; (void)f; return 0; }
int cudaHostUnregister(void* p) { (void)p; return 0; }
int cudaMalloc(void** p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int cudaFree(void* p) { free(p); return 0; }
int cudaStreamCreateWithFlags(void** s, unsigned f) { (void)f; *s = (void*)0x2000; return 0; }
int cudaStreamDestroy(void* s) { (void)s; return 0; }
int cudaStreamSynchronize(void* s) { (void)s; return 0; }
int cudaStreamWaitEvent(void* s, void* e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
int cudaEventCreateWithFlags(void** e, unsigned f) { (void)f; *e = (void*)0x3000; return 0; }
int cudaEventDestroy(void* e) { (void)e; return 0; }
int cudaEventRecord(void* e, void* s) { (void)e; (void)s; return 0; }
int cudaEventQuery(void* e) { (void)e; return 0; }
int cudaEventSynchronize(void* e) { (void)e; return 0; }
int cudaMemcpyAsync(void* d, const void* s, size_t n, int k, void* st) { (void)k; (void)st; memcpy(d, s, n); return 0; }
int cudaMemcpy(void* d, const void* s, size_t n, int k) { (void)k; memcpy(d, s, n); return 0; }

/* driver */
int cuInit(unsigned f) { (void)f; return 0; }
int cuDeviceGet(int* d, int ordinal) { *d = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { note("retain", d); *c = (void*)(uintptr_t)(0x1000 + d); return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxPushCurrent_v2(void* c) { if (depth == 16) return 1; contexts[depth++] = c; return 0; }
int cuCtxPopCurrent_v2(void** c) { if (depth == 0) return 201; *c = contexts[--depth]; return 0; }
