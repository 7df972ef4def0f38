/* The `loom demo` command. */
#ifndef LOOM_TOOLS_DEMO_H
#define LOOM_TOOLS_DEMO_H

int loom_demo_main(void);
/* model: "mlp" (default when NULL) or "cnn". */
int loom_explain_main(const char *model);

#endif
