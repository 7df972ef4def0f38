/* The `loom demo` command. */
#ifndef LOOM_TOOLS_DEMO_H
#define LOOM_TOOLS_DEMO_H

int loom_demo_main(void);

#endif
