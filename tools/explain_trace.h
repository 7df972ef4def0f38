/* The `loom explain trace` command. */
#ifndef LOOM_TOOLS_EXPLAIN_TRACE_H
#define LOOM_TOOLS_EXPLAIN_TRACE_H

/* Runs a small traced program and prints the trace's report. */
int loom_explain_trace_main(void);

#endif
