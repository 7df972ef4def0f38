#include "core/dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const dtype_names[LOOM_DTYPE_COUNT] = {
    [LOOM_F32] = "f32", [LOOM_F64] = "f64", [LOOM_F16] = "f16",
    [LOOM_BF16] = "bf16", [LOOM_I8] = "i8", [LOOM_I32] = "i32",
    [LOOM_I64] = "i64", [LOOM_BOOL] = "bool",
};

static const size_t dtype_sizes[LOOM_DTYPE_COUNT] = {
    [LOOM_F32] = 4, [LOOM_F64] = 8, [LOOM_F16] = 2, [LOOM_BF16] = 2,
    [LOOM_I8] = 1,  [LOOM_I32] = 4, [LOOM_I64] = 8, [LOOM_BOOL] = 1,
};

bool dtype_valid(loom_dtype_t d) {
  return (unsigned)d < (unsigned)LOOM_DTYPE_COUNT;
}

const char *loom_dtype_name(loom_dtype_t d) {
  return dtype_valid(d) ? dtype_names[d] : "?";
}

size_t loom_dtype_size(loom_dtype_t d) {
  return dtype_valid(d) ? dtype_sizes[d] : 0;
}

const char *dtype_mask_str(uint32_t mask, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < LOOM_DTYPE_COUNT && used < size; d++)
    if (mask & DT_BIT(d))
      used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                               dtype_names[d]);
  return buf;
}

bool dtype_is_float(loom_dtype_t d) {
  return dtype_valid(d) && (DT_FLOAT & DT_BIT(d));
}

bool dtype_is_int(loom_dtype_t d) {
  return dtype_valid(d) && (DT_INT & DT_BIT(d));
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Rounds v to the nearest (ties to even) number of a binary format with
 * ebits exponent and mbits mantissa bits; returns its bit pattern. */
static uint32_t narrow_float(double v, int ebits, int mbits) {
  uint32_t sign = signbit(v) ? 1u << (ebits + mbits) : 0;
  uint32_t inf = ((1u << ebits) - 1) << mbits;
  int bias = (1 << (ebits - 1)) - 1;
  if (isnan(v)) return sign | inf | (1u << (mbits - 1));
  double a = fabs(v);
  if (isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  int exp = e - 1; /* a = 1.m * 2^exp */
  if (exp < 1 - bias) {
    /* Subnormal: the unit is 2^(1-bias-mbits); a count of 2^mbits units
     * is the smallest normal, whose bit pattern is the same number. */
    return sign | (uint32_t)rint(ldexp(a, bias - 1 + mbits));
  }
  double q = rint(ldexp(a, mbits - exp));
  if (q >= ldexp(1, mbits + 1)) {
    q /= 2;
    exp++;
  }
  if (exp > bias) return sign | inf;
  return sign | ((uint32_t)(exp + bias) << mbits) |
         ((uint32_t)q - (1u << mbits));
}

uint16_t f32_to_f16(float f) { return (uint16_t)narrow_float(f, 5, 10); }

float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
    float v = (float)mant / 16777216.0f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000 | (mant << 13));
  return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t f32_to_bf16(float f) { return (uint16_t)narrow_float(f, 8, 7); }

float bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

double dtype_load_f64(loom_dtype_t d, const void *p) {
  switch (d) {
    case LOOM_F32: return *(const float *)p;
    case LOOM_F64: return *(const double *)p;
    case LOOM_F16: return f16_to_f32(*(const uint16_t *)p);
    case LOOM_BF16: return bf16_to_f32(*(const uint16_t *)p);
    case LOOM_I8: return *(const int8_t *)p;
    case LOOM_I32: return *(const int32_t *)p;
    case LOOM_I64: return (double)*(const int64_t *)p;
    case LOOM_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return 0;
  }
}

int64_t dtype_load_i64(loom_dtype_t d, const void *p) {
  switch (d) {
    case LOOM_I8: return *(const int8_t *)p;
    case LOOM_I32: return *(const int32_t *)p;
    case LOOM_I64: return *(const int64_t *)p;
    case LOOM_BOOL: return *(const uint8_t *)p != 0;
    default: {
      double v = dtype_load_f64(d, p);
      if (isnan(v)) return 0;
      if (v >= 9223372036854775807.0) return INT64_MAX;
      if (v <= -9223372036854775808.0) return INT64_MIN;
      return (int64_t)v;
    }
  }
}

/* Truncates toward zero and saturates to [lo, hi]; NaN becomes 0. */
static int64_t saturate(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

void dtype_store_f64(loom_dtype_t d, void *p, double v) {
  switch (d) {
    case LOOM_F32: *(float *)p = (float)v; break;
    case LOOM_F64: *(double *)p = v; break;
    case LOOM_F16: *(uint16_t *)p = (uint16_t)narrow_float(v, 5, 10); break;
    case LOOM_BF16: *(uint16_t *)p = (uint16_t)narrow_float(v, 8, 7); break;
    case LOOM_I8: *(int8_t *)p = (int8_t)saturate(v, -128, 127); break;
    case LOOM_I32:
      *(int32_t *)p = (int32_t)saturate(v, -2147483648.0, 2147483647.0);
      break;
    case LOOM_I64: *(int64_t *)p = dtype_f64_to_i64(v); break;
    case LOOM_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
  }
}

void dtype_store_i64(loom_dtype_t d, void *p, int64_t v) {
  switch (d) {
    /* Integer results wrap like C's two's-complement conversions. */
    case LOOM_I8: *(int8_t *)p = (int8_t)(uint8_t)(uint64_t)v; break;
    case LOOM_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case LOOM_I64: *(int64_t *)p = v; break;
    case LOOM_BOOL: *(uint8_t *)p = v != 0; break;
    default: dtype_store_f64(d, p, (double)v); break;
  }
}
