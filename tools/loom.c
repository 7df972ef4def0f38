/* The loom command line tool. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "demo.h"
#include "explain_trace.h"
#include "onnx_cli.h"
#include "loom/loom.h"

/* The op's attributes as the op table writes them: "axis:int=-1 ...". */
static void print_attrs(int op) {
  for (int k = 0; k < loom_op_attr_count(op); k++) {
    loom_attr_info_t a = LOOM_ATTR_INFO_INIT;
    if (loom_op_get_attr(op, k, &a) != LOOM_OK) return;
    printf("%s%s:%s%s%s", k ? " " : " {", a.name, loom_attr_kind_name(a.kind),
           a.has_default ? "=" : a.optional ? "?" : "", a.default_text);
  }
  if (loom_op_attr_count(op) > 0) printf("}");
}

/* One column per back end: whether it generates code for the op ("yes")
 * or runs the op's reference kernel there ("no"). */
static int cmd_ops(void) {
  int n_targets = loom_target_count();
  printf("%-18s %-12s %-4s %-5s ", "op", "class", "ref", "grad");
  for (int t = 0; t < n_targets; t++) printf("%-5s ", loom_target_name(t));
  printf("%s\n", "meaning {attributes}");
  for (int i = 0; i < loom_op_count(); i++) {
    loom_op_info_t info = LOOM_OP_INFO_INIT;
    if (loom_op_get_info(i, &info) != LOOM_OK) return 1;
    printf("%-18s %-12s %-4s %-5s ", info.name, info.fusion_class,
           info.has_reference ? "yes" : "no",
           info.has_gradient ? "yes" : info.not_differentiable ? "n/a" : "no");
    for (int t = 0; t < n_targets; t++) {
      int gen = 0;
      if (loom_op_generated(i, loom_target_name(t), &gen) != LOOM_OK) return 1;
      printf("%-5s ", gen ? "yes" : "no");
    }
    printf("%s%s", info.doc, info.data_dependent_shape ? " [data-dependent shape]" : "");
    print_attrs(i);
    printf("\n");
  }
  return 0;
}

/* The ONNX ops the importer has, and why not for the others. */
static int cmd_onnx_ops(void) {
  static const char *const names[] = {
#define OX_RULE(name, fn) #name,
#define OX_UNARY(name, builder) #name,
#define OX_BINARY(name, builder) #name,
#define OX_NOT(name, reason) #name,
#include "frontend/onnx/onnx_ops.def"
#undef OX_RULE
#undef OX_UNARY
#undef OX_BINARY
#undef OX_NOT
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *reason;
    int ok = loom_onnx_op_supported(names[i], &reason);
    printf("%-26s %s\n", names[i], ok ? "imported" : reason);
  }
  return 0;
}

/* The public API as JSON (loom_api_describe), for bindings. */
static int cmd_api(void) {
  char *json = NULL;
  if (loom_api_describe(&json) != LOOM_OK) {
    fprintf(stderr, "loom api: %s\n", loom_last_error());
    return 1;
  }
  fputs(json, stdout);
  loom_free(json);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "ops")) return cmd_ops();
  if (argc == 2 && !strcmp(argv[1], "api")) return cmd_api();
  if (argc == 2 && !strcmp(argv[1], "demo")) return loom_demo_main();
  if (argc == 3 && !strcmp(argv[1], "explain") && !strcmp(argv[2], "trace"))
    return loom_explain_trace_main();
  /* run and bench take a model at any path (the loader says what is
   * wrong with one that is not); explain takes a demo's name or one */
  bool demo = argc == 2 || (argc == 3 && (!strcmp(argv[2], "mlp") || !strcmp(argv[2], "cnn")));
  if (argc >= 3 && !strcmp(argv[1], "run")) return loom_onnx_run_main(argc - 2, argv + 2);
  if (argc >= 3 && !strcmp(argv[1], "bench")) return loom_onnx_bench_main(argc - 2, argv + 2);
  if (argc >= 3 && !strcmp(argv[1], "explain") && !demo)
    return loom_onnx_explain_main(argc - 2, argv + 2);
  if (argc == 2 && !strcmp(argv[1], "onnx-ops")) return cmd_onnx_ops();
  if (demo && !strcmp(argv[1], "explain")) return loom_explain_main(argc == 3 ? argv[2] : NULL);
  fprintf(stderr,
          "usage: loom <command>\n"
          "  ops    list the op table: class, which rules each op has, attributes\n"
          "  api    print the public API as JSON for bindings: functions, struct\n"
          "         layouts (offsets and sizes), enums, typedefs, constants\n"
          "  demo   build, interpret and compile a small MLP and CNN\n"
          "  explain [mlp|cnn]\n"
          "         show what the compiler makes of a demo model: passes,\n"
          "         fusion groups, steps, memory plan, generated C\n"
          "  explain trace\n"
          "         run a small traced program and show its graph breaks,\n"
          "         recompiles and cache\n"
          "  run MODEL.onnx [--input NAME=FILE.npy ...] [--dim NAME=SIZE ...]\n"
          "      [--threads N] [--output-dir DIR]\n"
          "         run an ONNX model (random inputs where none are given) and\n"
          "         write each output as DIR/NAME.npy\n"
          "  bench MODEL.onnx [--runs N] [--threads N] [--dim NAME=SIZE ...]\n"
          "         load, compile and time it: latency percentiles, throughput,\n"
          "         compile time and memory, as JSON\n"
          "  explain MODEL.onnx [--dim NAME=SIZE ...]\n"
          "         the imported graph, fusion groups and memory plan\n"
          "  onnx-ops\n"
          "         the ONNX ops the importer has, and why not the others\n");
  return 2;
}
