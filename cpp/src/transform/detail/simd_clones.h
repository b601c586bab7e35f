// CHUTE_SIMD_CLONES: compile a flat loop for AVX-512, AVX2 and the baseline, the best picked at load time
// (GCC's and clang's target_clones). The pixel ops' loops are written branch-free so that the compiler
// vectorises them; without FMA contraction (-ffp-contract=off on those files) each vector lane computes the
// scalar code's IEEE float32 steps, so every clone gives the same bytes.
#pragma once

// CHUTE_SIMD_CLONES_FMA: the same for loops that fuse on purpose (std::fma, as torch's kernels do): the
// AVX2 clone takes Haswell's FMA; the baseline calls the C library's exact fmaf.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__SANITIZE_ADDRESS__)
#define CHUTE_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define CHUTE_SIMD_CLONES_FMA __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define CHUTE_SIMD_CLONES
#define CHUTE_SIMD_CLONES_FMA
#endif
