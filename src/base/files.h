/* files.h — small filesystem helpers the JIT and the Vulkan pipeline cache
 * share: creating folders, and where source dumps go. */
#ifndef KILN_BASE_FILES_H
#define KILN_BASE_FILES_H

/* mkdir -p with mode 0700; 0, or the errno of the step that failed. */
int kiln_make_dirs(const char *dir);

/* The folder generated sources of `kind` ("c", "glsl") are dumped to, or
 * NULL when dumps are off: KILN_DUMP_DIR names it (and turns every kind
 * on); otherwise KILN_DUMP=KIND or all (a comma/space separated list) means
 * "kiln_dump" in the working directory. The string is the environment's or
 * static: do not free it. */
const char *kiln_dump_dir(const char *kind);

#endif
