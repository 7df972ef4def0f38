/* The loom tool's commands on ONNX models (tools/onnx_cli.c). */
#ifndef LOOM_TOOLS_ONNX_CLI_H
#define LOOM_TOOLS_ONNX_CLI_H

/* argv: the words after the command's name. */
int loom_onnx_run_main(int argc, char **argv);
int loom_onnx_bench_main(int argc, char **argv);
int loom_onnx_explain_main(int argc, char **argv);

#endif
