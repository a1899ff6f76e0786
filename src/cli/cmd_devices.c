#include <stdio.h>

#include "cli/cli.h"

int kiln_cmd_devices(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    puts("usage: kiln devices\n\nLists the devices kiln can run on, with their properties.");
    return 0;
  }
  if (argc > 1) return kiln_cli_failf("devices takes no arguments (got '%s')", argv[1]);
  kiln_device *devs[16];
  int n = kiln_device_list(devs, 16);
  for (int i = 0; i < n && i < 16; i++) {
    kiln_device_info info;
    devs[i]->vt->query(devs[i], &info);
    printf("%-10s %s\n", info.name, info.description);
    printf("%-10s vendor: %s; memory: %s", "", info.vendor, info.host_memory ? "host" : "device");
    if (info.memory_bytes) printf(" (%.1f GiB)", (double)info.memory_bytes / (1 << 30));
    if (info.compute_units) printf("; compute units: %d", info.compute_units);
    if (info.subgroup_size) printf("; subgroup size: %d", info.subgroup_size);
    if (info.driver) printf("; driver: %s", info.driver);
    printf("; features:%s%s%s%s%s%s%s\n", info.features & KILN_DEVICE_FEATURE_ALL_DTYPES ? " all-dtypes" : "",
           info.features & KILN_DEVICE_FEATURE_FP16 ? " fp16" : "",
           info.features & KILN_DEVICE_FEATURE_INT8_DOT ? " int8-dot" : "",
           info.features & KILN_DEVICE_FEATURE_COOPERATIVE_MATRIX ? " cooperative-matrix" : "",
           info.features & KILN_DEVICE_FEATURE_FUSED_ATTENTION ? " fused-attention" : "",
           info.features & KILN_DEVICE_FEATURE_RECURRENT_ROUTINE ? " recurrent-routine" : "",
           info.features & KILN_DEVICE_FEATURE_QDQ_INTEGER ? " qdq-integer" : "");
  }
  const char *names[16], *reasons[16];
  int n_absent = kiln_device_absent_list(names, reasons, 16);
  for (int i = 0; i < n_absent; i++) printf("%-10s absent: %s\n", names[i], reasons[i]);
  return 0;
}
