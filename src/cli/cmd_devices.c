#include <stdio.h>

#include "api/api.h"
#include "cli/cli.h"

/* The text form of kiln_devices_json: the same properties from the same
 * device queries (api/devices_json.c). */
int kiln_cmd_devices(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    puts("usage: kiln devices [--json]\n\nLists the devices kiln can run on, with their properties.\n"
         "--json prints what kiln_devices_json returns (the schema is in include/kiln.h).");
    return 0;
  }
  bool json = argc == 2 && !strcmp(argv[1], "--json");
  if (argc > 1 && !json) return kiln_cli_failf("devices takes no arguments but --json (got '%s')", argv[1]);
  if (json) {
    char *text = NULL;
    kiln_status_t st = kiln_devices_json(&text);
    if (st) return kiln_cli_fail(st);
    puts(text);
    kiln_string_free(text);
    return 0;
  }
  kiln_device *devs[16];
  int n = kiln_device_list(devs, 16);
  for (int i = 0; i < n && i < 16; i++) {
    kiln_device_info info;
    devs[i]->vt->query(devs[i], &info);
    char features[256];
    kiln_device_features_str(info.features, features, sizeof features);
    printf("%-10s %s\n", info.name, info.description);
    printf("%-10s vendor: %s; memory: %s", "", info.vendor, info.host_memory ? "host" : "device");
    if (info.memory_bytes) printf(" (%.1f GiB)", (double)info.memory_bytes / (1 << 30));
    if (info.compute_units) printf("; compute units: %d", info.compute_units);
    if (info.subgroup_size) printf("; subgroup size: %d", info.subgroup_size);
    if (info.driver) printf("; driver: %s", info.driver);
    printf("; features:%s\n", features);
  }
  const char *names[16], *reasons[16];
  int n_absent = kiln_device_absent_list(names, reasons, 16);
  for (int i = 0; i < n_absent; i++) printf("%-10s absent: %s\n", names[i], reasons[i]);
  return 0;
}
