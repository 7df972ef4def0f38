/* The runtime side of the ABI (abi.h): what generated code calls, the
 * pool's parallel loop and the fast kernels, with the convolution
 * algorithms the compile options allow. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/kernels/gemm.h"
#include "core/env.h"

static void abi_parallel_for(void *pool, int64_t n, int64_t grain,
                             loom_abi_body_t body, void *ctx) {
  core_pool_for(pool, n, grain, body, ctx);
}

static void abi_gemm_f32(const loom_abi_gemm_t *d, void *pool) {
  kern_gemm_f32(d, pool);
}

static void abi_conv2d_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_f32(d, KERN_CONV_DEFAULT, pool);
}

static void abi_conv2d_precise_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_f32(d, KERN_CONV_PRECISE, pool);
}

static void abi_conv2d_fast_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_f32(d, KERN_CONV_FAST, pool);
}

static void abi_conv2d_weight_grad_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_weight_grad_f32(d, pool);
}

static void abi_conv2d_input_grad_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_input_grad_f32(d, KERN_CONV_DEFAULT, pool);
}

static void abi_conv2d_input_grad_precise_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_input_grad_f32(d, KERN_CONV_PRECISE, pool);
}

static void abi_conv2d_input_grad_fast_f32(const loom_abi_conv2d_t *d, void *pool) {
  kern_conv2d_input_grad_f32(d, KERN_CONV_FAST, pool);
}

/* The convolution algorithms o allows (loom.h's precise): 1 direct sums
 * only, -1 the fastest, 0 the default or LOOM_PRECISE's 1 or -1. */
kern_conv_mode_t cpu_conv_mode(const loom_compile_options_t *o) {
  int precise = o->precise;
  const char *env = core_getenv("LOOM_PRECISE");
  if (precise == 0 && env) precise = strcmp(env, "1") == 0 ? 1 : strcmp(env, "-1") == 0 ? -1 : 0;
  return precise > 0 ? KERN_CONV_PRECISE : precise < 0 ? KERN_CONV_FAST : KERN_CONV_DEFAULT;
}

void cpu_abi_init(be_program_t *p) {
  p->abi = (loom_abi_t){.version = LOOM_ABI_VERSION,
                        .threads = core_pool_threads(p->pool),
                        .pool = p->pool,
                        .parallel_for = abi_parallel_for,
                        .gemm_f32 = abi_gemm_f32,
                        .conv2d_f32 = abi_conv2d_f32,
                        .conv2d_weight_grad_f32 = abi_conv2d_weight_grad_f32,
                        .conv2d_input_grad_f32 = abi_conv2d_input_grad_f32,
                        .packed_b = (const void *const *)p->packed_b,
                        .packed_w = (const void *const *)p->packed_w};
  /* The generated code calls the same entries whatever the mode. */
  if (p->conv_mode == KERN_CONV_PRECISE) {
    p->abi.conv2d_f32 = abi_conv2d_precise_f32;
    p->abi.conv2d_input_grad_f32 = abi_conv2d_input_grad_precise_f32;
  } else if (p->conv_mode == KERN_CONV_FAST) {
    p->abi.conv2d_f32 = abi_conv2d_fast_f32;
    p->abi.conv2d_input_grad_f32 = abi_conv2d_input_grad_fast_f32;
  }
}
