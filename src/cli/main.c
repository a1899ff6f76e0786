/* kiln — command-line entry point. */
#include <stdarg.h>
#include <stdio.h>

#include "cli/cli.h"
#include "kiln_commit.h" /* generated: cmake/kiln_commit.cmake */
#include "cli/cmd_bench.h"

static const char *usage_text =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  run MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--output-dir DIR]\n"
    "                       run a model; write DIR/output_<i>.npy or print the outputs\n"
    "  info MODEL.onnx [--dot]\n"
    "                       opsets, inputs/outputs, op histogram, parameters, FLOPs,\n"
    "                       unsupported ops; --dot prints the graph for Graphviz\n"
    "  bench MODEL.onnx [--device D] [--threads N] [--warmup W] [--iterations K] [--profile] [--json]\n"
    "                       latency statistics (median, p10/p90, min), throughput, peak RSS;\n"
    "                       --profile adds a per-node time table\n"
    "  verify MODEL.onnx [--device D] [--input NAME=FILE.npy]... [--rtol R] [--atol A]\n"
    "                       run on D and on ref with the same inputs; report the first\n"
    "                       node whose output diverges\n"
    "  train MODEL.onnx --data TRAIN.npz --loss L [--optimizer sgd|adam|adamw] [--lr LR] [--epochs E] ...\n"
    "                       train the model (autodiff, loss and optimizer as one graph);\n"
    "                       --save the trained model, --checkpoint / --resume, --log JSON lines\n"
    "  devices              the devices available and their properties\n"
    "  help                 this text; `kiln CMD --help` for one command\n"
    "  --version            the version\n";

int kiln_cli_fail(kiln_status_t st) {
  char *msg = kiln_strdup(kiln_status_message(st));
  for (char *p = msg; p && *p; p++)
    if (*p == '\n') *p = ' ';
  fprintf(stderr, "kiln: error: %s\n", msg ? msg : "out of memory");
  free(msg);
  kiln_status_free(st);
  return 1;
}

int kiln_cli_failf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

bool kiln_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
  return false;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("kiln %s (commit %s)\n", kiln_version(), KILN_COMMIT_STRING);
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (!strcmp(cmd, "run")) return kiln_cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "info")) return kiln_cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return kiln_cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "train")) return kiln_cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "verify")) return kiln_cmd_verify(argc - 1, argv + 1);
  if (!strcmp(cmd, "devices")) return kiln_cmd_devices(argc - 1, argv + 1);
  fprintf(stderr, "kiln: error: unknown command '%s' (try `kiln help`)\n", cmd);
  return 2;
}
