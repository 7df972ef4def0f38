/* The CPU back end's float math: e^x, erf, tanh and erfc written out
 * (no libm call) so that loops over them vectorize. One source for two
 * users: generated modules carry this text in their prelude
 * (cmake/embed_text.cmake, cg_float_math_text), and the eager kernels
 * include it, so that the fallback computes these functions as compiled
 * code does.
 *
 * A user may define LOOM_VECTOR_FN first (generated code makes each
 * function a vector function under GCC); by default they are static
 * inline. Errors are against the double-precision functions, on all of
 * float's range; NaN stays NaN and no function branches (each clamp is
 * unconditional). Polynomials step by fmaf: one rounding a step, the
 * same result in every build and on every ISA, and on FMA hardware one
 * instruction where C's p * r + c (not contracted under -std=c11) is two
 * with twice the latency: e^x over an array of 1.2M floats went 0.37 ->
 * 0.22 ns an element at 16 lanes (AVX-512, a driver over this function,
 * best of 100). */
#ifndef LOOM_BACKEND_CPU_FLOAT_MATH_H
#define LOOM_BACKEND_CPU_FLOAT_MATH_H

#include <math.h>
#include <stdint.h>

#ifndef LOOM_VECTOR_FN
#define LOOM_VECTOR_FN static inline
#endif

typedef union { uint32_t u; float f; } loom_f32_bits_t;

/* e^x: x = n ln2 + r with |r| <= ln2/2 (n rounded by the
 * 1.5 * 2^23 trick, which leaves it in t's low bits), e^r by its
 * Taylor polynomial to degree 7 (under 1e-8 relative), 2^n built in
 * the exponent bits in two halves so that results from the subnormals
 * up to overflow come out right; within 2 ulp of exp. */
LOOM_VECTOR_FN float loom_expf(float x) {
  float c = x > 89.0f ? 89.0f : x;
  c = c < -104.0f ? -104.0f : c;
  loom_f32_bits_t t = {.f = fmaf(c, 1.44269504088896341f, 12582912.0f)};
  float n = t.f - 12582912.0f;
  int32_t k = (int32_t)(t.u - 0x4b400000u), h = k >> 1;
  float r = fmaf(-n, 1.42860682030941723212e-6f, fmaf(-n, 0.693145751953125f, c));
  float p = 1.98412698412698413e-4f;
  p = fmaf(p, r, 1.38888888888888889e-3f);
  p = fmaf(p, r, 8.33333333333333333e-3f);
  p = fmaf(p, r, 4.16666666666666667e-2f);
  p = fmaf(p, r, 1.66666666666666667e-1f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  loom_f32_bits_t s1 = {.u = (uint32_t)(h + 127) << 23};
  loom_f32_bits_t s2 = {.u = (uint32_t)(k - h + 127) << 23};
  return p * s1.f * s2.f;
}

/* erf (GELU epilogues): x P(x^2) / Q(x^2) on x clamped to [-4, 4]
 * (Eigen's rational form; within 4.3e-7 of erf). */
LOOM_VECTOR_FN float loom_erff(float x) {
  float c = x > 4.0f ? 4.0f : x;
  c = c < -4.0f ? -4.0f : c;
  float x2 = c * c;
  float p = -2.72614225801306e-10f;
  p = fmaf(p, x2, 2.77068142495902e-08f);
  p = fmaf(p, x2, -2.10102402082508e-06f);
  p = fmaf(p, x2, -5.69250639462346e-05f);
  p = fmaf(p, x2, -7.34990630326855e-04f);
  p = fmaf(p, x2, -2.95459980854025e-03f);
  p = fmaf(p, x2, -1.60960333262415e-02f);
  float q = -1.45660718464996e-05f;
  q = fmaf(q, x2, -2.13374055278905e-04f);
  q = fmaf(q, x2, -1.68282697438203e-03f);
  q = fmaf(q, x2, -7.37332916720468e-03f);
  q = fmaf(q, x2, -1.42647390514189e-02f);
  return c * p / q;
}

/* tanh (LSTM cells): x P(x^2) / Q(x^2) on x clamped to +-7.905 (Eigen's
 * rational form; within 4e-7 relative of tanh), x itself below 4e-4. */
LOOM_VECTOR_FN float loom_tanhf(float x) {
  float c = x > 7.90531110763549805f ? 7.90531110763549805f : x;
  c = c < -7.90531110763549805f ? -7.90531110763549805f : c;
  float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = fmaf(p, x2, 2.00018790482477e-13f);
  p = fmaf(p, x2, -8.60467152213735e-11f);
  p = fmaf(p, x2, 5.12229709037114e-08f);
  p = fmaf(p, x2, 1.48572235717979e-05f);
  p = fmaf(p, x2, 6.37261928875436e-04f);
  p = fmaf(p, x2, 4.89352455891786e-03f);
  float q = 1.19825839466702e-06f;
  q = fmaf(q, x2, 1.18534705686654e-04f);
  q = fmaf(q, x2, 2.26843463243900e-03f);
  q = fmaf(q, x2, 4.89352518554385e-03f);
  float r = c * p / q;
  return fabsf(x) < 0.0004f ? x : r;
}

/* erfc: t e^(P(t) - z^2), t = 1/(1 + |z|/2) (Numerical Recipes' erfcc,
 * 1.2e-7 relative; in float within 8e-6 relative, from rounding z^2,
 * near underflow), and 2 - erfc(-z) for z < 0. */
LOOM_VECTOR_FN float loom_erfcf(float z) {
  float a = fabsf(z), t = 1.0f / (1.0f + 0.5f * a);
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  float r = t * loom_expf(p - a * a);
  return z >= 0 ? r : 2.0f - r;
}

/* The logistic function in its two stable forms, 1 / (1 + e) and
 * e / (1 + e), selected by x's sign: e^-|x| is e^-x on one side and e^x
 * on the other, so one exponential serves both, and one division (the
 * numerator selected first). */
static inline float loom_sigmoidf(float x) {
  float e = loom_expf(-fabsf(x));
  return (x >= 0 ? 1.0f : e) / (1.0f + e);
}

#endif
