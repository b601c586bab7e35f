// CHUTE_SIMD_CLONES: compile a flat loop for AVX-512, AVX2 and the baseline, the best picked at load time
// (GCC's and clang's target_clones). The pixel ops' loops are written branch-free so that the compiler
// vectorises them; without FMA contraction (-ffp-contract=off on those files) each vector lane computes the
// scalar code's IEEE float32 steps, so every clone gives the same bytes.
#pragma once

// CHUTE_SIMD_CLONES_FMA: the same for loops that fuse on purpose (std::fma, as torch's kernels do): the
// AVX2 clone takes Haswell's FMA; the baseline calls the C library's exact fmaf.
//
// Not under a sanitizer: a clone's resolver runs while the dynamic loader relocates, before the sanitizer's
// run-time is set up, and instrumented it crashes there (TSan: SIGSEGV in blur_rows's resolver at start-up).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CHUTE_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHUTE_SANITIZED 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(CHUTE_SANITIZED)
#define CHUTE_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define CHUTE_SIMD_CLONES_FMA __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define CHUTE_SIMD_CLONES
#define CHUTE_SIMD_CLONES_FMA
#endif
