/* cmd_bench.h — `kiln bench` and `kiln verify`, and what they share: binding
 * a model's graph inputs from --input files or random data.
 *
 * Random inputs (for every non-constant graph input not given by --input):
 * the declared dtype and shape, symbolic or unknown dims set from --dim
 * NAME=VALUE or 1; floats are normal(0,1), integers uniform in [0, 3], bools
 * 0/1, all from a fixed seed (--seed, default 0) so runs are repeatable.
 * Optional inputs are left empty; sequence, string and unknown-rank inputs
 * must be given with --input.
 */
#ifndef KILN_CLI_CMD_BENCH_H
#define KILN_CLI_CMD_BENCH_H

#include "cli/cli.h"

int kiln_cmd_bench(int argc, char **argv);
int kiln_cmd_verify(int argc, char **argv);

#define KILN_CLI_MAX_INPUTS 256
#define KILN_CLI_MAX_DIMS 64

typedef struct kiln_cli_inputs {
  /* Options (filled by kiln_cli_inputs_parse). */
  int n_files;
  char *file_names[KILN_CLI_MAX_INPUTS]; /* owned */
  const char *file_paths[KILN_CLI_MAX_INPUTS]; /* borrowed from argv */
  int n_dims;
  const char *dim_names[KILN_CLI_MAX_DIMS]; /* borrowed from argv (up to '=') */
  size_t dim_name_len[KILN_CLI_MAX_DIMS];
  int64_t dim_values[KILN_CLI_MAX_DIMS];
  uint64_t seed;
  /* Bound inputs (filled by kiln_cli_inputs_build), in graph-input order. */
  int n;
  const char *names[KILN_CLI_MAX_INPUTS]; /* borrowed from the model */
  kiln_value *values[KILN_CLI_MAX_INPUTS]; /* owned */
  char *desc[KILN_CLI_MAX_INPUTS];         /* owned: "x f32[1,3] random normal(0,1)" */
} kiln_cli_inputs;

/* If argv[*i] is --input NAME=FILE.npy, --dim NAME=VALUE or --seed S,
 * consumes it and its value (advancing *i) and returns 1; returns 0 for any
 * other argument; prints an error and returns -1 for a malformed one. */
int kiln_cli_inputs_parse(kiln_cli_inputs *in, int argc, char **argv, int *i);
/* Reads the --input files and makes random values for the other inputs. */
kiln_status_t kiln_cli_inputs_build(kiln_cli_inputs *in, const kiln_model *model);
void kiln_cli_inputs_free(kiln_cli_inputs *in);

/* Name of the session's primary device (the default one when none was
 * requested); borrowed from the process-wide device. */
const char *kiln_cli_session_device(const kiln_session *sess, const char *requested);

/* Seconds on a monotonic clock. */
double kiln_cli_now(void);

#endif
