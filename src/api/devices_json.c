/* kiln_devices_json (include/kiln.h), and the property list `kiln devices` prints. */
#include "api/api.h"

static const struct {
  unsigned bit;
  const char *name;
} feature_names[] = {
    {KILN_DEVICE_FEATURE_ALL_DTYPES, "all-dtypes"},
    {KILN_DEVICE_FEATURE_FP16, "fp16"},
    {KILN_DEVICE_FEATURE_INT8_DOT, "int8-dot"},
    {KILN_DEVICE_FEATURE_COOPERATIVE_MATRIX, "cooperative-matrix"},
    {KILN_DEVICE_FEATURE_FUSED_ATTENTION, "fused-attention"},
    {KILN_DEVICE_FEATURE_RECURRENT_ROUTINE, "recurrent-routine"},
    {KILN_DEVICE_FEATURE_ATTENTION_ROUTINE, "attention-routine"},
    {KILN_DEVICE_FEATURE_QDQ_INTEGER, "qdq-integer"},
};

void kiln_device_features_str(unsigned features, char *buf, size_t size) {
  if (!size) return;
  buf[0] = 0;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(feature_names); i++)
    if (features & feature_names[i].bit) {
      size_t len = strlen(buf);
      snprintf(buf + len, size - len, " %s", feature_names[i].name);
    }
}

void kiln_device_info_json(kiln_json *j, const kiln_device_info *info) {
  kiln_json_string(j, "name", info->name ? info->name : "");
  kiln_json_string(j, "description", info->description ? info->description : "");
  kiln_json_string(j, "vendor", info->vendor ? info->vendor : "");
  kiln_json_string(j, "driver", info->driver);
  kiln_json_string(j, "memory", info->host_memory ? "host" : "device");
  kiln_json_int(j, "memory_bytes", (int64_t)info->memory_bytes);
  kiln_json_int(j, "compute_units", info->compute_units);
  kiln_json_int(j, "subgroup_size", info->subgroup_size);
  kiln_json_array_begin(j, "features");
  for (size_t i = 0; i < KILN_ARRAY_SIZE(feature_names); i++)
    if (info->features & feature_names[i].bit) kiln_json_string(j, NULL, feature_names[i].name);
  kiln_json_array_end(j);
}

kiln_status_t kiln_devices_json(char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_devices_json: out_json is NULL");
  *out_json = NULL;
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_array_begin(&j, "devices");
  kiln_device *devs[16];
  int n = kiln_device_list(devs, 16);
  for (int i = 0; i < n && i < 16; i++) {
    kiln_device_info info = {0};
    devs[i]->vt->query(devs[i], &info);
    kiln_json_object_begin(&j, NULL);
    kiln_device_info_json(&j, &info);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  const char *names[16], *reasons[16];
  int n_absent = kiln_device_absent_list(names, reasons, 16);
  kiln_json_array_begin(&j, "absent");
  for (int i = 0; i < n_absent && i < 16; i++) {
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "name", names[i]);
    kiln_json_string(&j, "reason", reasons[i]);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_object_end(&j);
  return kiln_json_finish(&j, out_json);
}
