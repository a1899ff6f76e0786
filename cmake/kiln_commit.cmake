# Writes OUT (a header defining KILN_COMMIT_STRING: the source tree's commit,
# "+dirty" when tracked files differ from it) at every build, touching it
# only when the text changes, so `kiln --version` names the commit the binary
# was built from and benchmarks can record it (bench/run_bench.py).
#   cmake -DSRC=source-dir -DOUT=header -P kiln_commit.cmake
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} rev-parse --short HEAD
                  OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND rev)
    set(commit ${rev})
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(dirty)
      set(commit "${commit}+dirty")
    endif()
  endif()
endif()
set(text "#define KILN_COMMIT_STRING \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
