/* Dtype properties and element conversion. Reference kernels compute in
 * double (floats) or int64 (integers and bool) and convert on load/store. */
#ifndef LOOM_CORE_DTYPE_H
#define LOOM_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/loom.h"

/* Masks of dtypes, used by the op table. */
#define DT_BIT(d) (1u << (d))
#define DT_FLOAT \
  (DT_BIT(LOOM_F32) | DT_BIT(LOOM_F64) | DT_BIT(LOOM_F16) | DT_BIT(LOOM_BF16))
#define DT_INT (DT_BIT(LOOM_I8) | DT_BIT(LOOM_I32) | DT_BIT(LOOM_I64))
#define DT_NUMERIC (DT_FLOAT | DT_INT)
#define DT_ALL (DT_NUMERIC | DT_BIT(LOOM_BOOL))

bool dtype_valid(loom_dtype_t d);
/* The dtypes of a mask as "f32, f64, ..." in buf. */
const char *dtype_mask_str(uint32_t mask, char *buf, size_t size);
bool dtype_is_float(loom_dtype_t d);
bool dtype_is_int(loom_dtype_t d); /* i8, i32, i64 (not bool) */

/* IEEE half and bfloat16, round to nearest even. */
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

/* Element at p, of dtype d, as double or int64. */
double dtype_load_f64(loom_dtype_t d, const void *p);
int64_t dtype_load_i64(loom_dtype_t d, const void *p);
/* Stores v converted to dtype d (floats to ints truncate toward zero and
 * saturate; anything to bool is v != 0). */
void dtype_store_f64(loom_dtype_t d, void *p, double v);
void dtype_store_i64(loom_dtype_t d, void *p, int64_t v);

/* v as int64 the way dtype_store_f64 stores it: truncated toward zero,
 * saturated, NaN as 0. */
static inline int64_t dtype_f64_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

#endif
