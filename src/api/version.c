/* kiln_version and kiln_string_free (include/kiln.h). */
#include "base/common.h"

const char *kiln_version(void) { return KILN_VERSION_STRING; }

void kiln_string_free(char *s) { free(s); }
