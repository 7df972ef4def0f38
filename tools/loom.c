/* The loom command line tool. */
#include <stdio.h>
#include <string.h>

#include "loom/loom.h"

static int cmd_ops(void) {
  printf("%-18s %-12s %-4s %-5s %-8s %s\n", "op", "class", "ref", "grad", "codegen", "meaning");
  for (int i = 0; i < loom_op_count(); i++) {
    loom_op_info_t info;
    if (loom_op_get_info(i, &info) != LOOM_OK) return 1;
    printf("%-18s %-12s %-4s %-5s %-8s %s%s\n", info.name, info.fusion_class,
           info.has_reference ? "yes" : "no", info.has_gradient ? "yes" : "no",
           info.has_codegen ? "yes" : "no", info.doc,
           info.data_dependent_shape ? " [data-dependent shape]" : "");
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "ops")) return cmd_ops();
  fprintf(stderr, "usage: loom ops | demo\n");
  return 2;
}
