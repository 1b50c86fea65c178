#pragma once
#include <math.h>
#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#define LLAMACORE_ARGMAX_SSE 1
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#define LLAMACORE_ARGMAX_NEON 1
#endif

// The largest of the 64 floats at x.
static inline float llamacore_block_max(const float * x) {
#if defined(LLAMACORE_ARGMAX_SSE)
    __m128 a = _mm_loadu_ps(x), b = _mm_loadu_ps(x + 4), c = _mm_loadu_ps(x + 8), d = _mm_loadu_ps(x + 12);
    for (int j = 16; j < 64; j += 16) {
        a = _mm_max_ps(a, _mm_loadu_ps(x + j));
        b = _mm_max_ps(b, _mm_loadu_ps(x + j + 4));
        c = _mm_max_ps(c, _mm_loadu_ps(x + j + 8));
        d = _mm_max_ps(d, _mm_loadu_ps(x + j + 12));
    }
    a = _mm_max_ps(_mm_max_ps(a, b), _mm_max_ps(c, d));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
#elif defined(LLAMACORE_ARGMAX_NEON)
    float32x4_t a = vld1q_f32(x), b = vld1q_f32(x + 4), c = vld1q_f32(x + 8), d = vld1q_f32(x + 12);
    for (int j = 16; j < 64; j += 16) {
        a = vmaxq_f32(a, vld1q_f32(x + j));
        b = vmaxq_f32(b, vld1q_f32(x + j + 4));
        c = vmaxq_f32(c, vld1q_f32(x + j + 8));
        d = vmaxq_f32(d, vld1q_f32(x + j + 12));
    }
    return vmaxvq_f32(vmaxq_f32(vmaxq_f32(a, b), vmaxq_f32(c, d)));
#else
    float m = x[0];
    for (int j = 1; j < 64; j++) m = x[j] > m ? x[j] : m;
    return m;
#endif
}

// The first index of the largest of n floats: the token a greedy sampler picks (np.argmax's
// answer for logits without NaN). Block maxima use SIMD; only the winning block is searched.
static inline int llamacore_argmax(const float * x, int n) {
    float best = -INFINITY;
    int best_block = -1, i = 0, arg = 0;
    for (; i + 64 <= n; i += 64) {
        float m = llamacore_block_max(x + i);
        if (m > best) { best = m; best_block = i; }
    }
    if (best_block >= 0) {
        arg = best_block;
        while (x[arg] != best) arg++;
    }
    for (; i < n; i++) {
        if (x[i] > best || (best_block < 0 && i == 0)) { best = x[i]; arg = i; }
    }
    return arg;
}
