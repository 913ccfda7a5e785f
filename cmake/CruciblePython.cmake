# CRUCIBLE_PYTHON: the Python interpreter with torch that the tests read Crucible's files with and
# the benchmarks compare against. When not given, the first of `python3` on the PATH and
# /usr/bin/python3 that imports torch; empty when none does (the test tree then refuses to
# configure; the benchmarks report their Python runners as failed).
set(CRUCIBLE_PYTHON "" CACHE FILEPATH "Python interpreter with torch for the tests and benchmarks")
if(NOT CRUCIBLE_PYTHON)
  find_program(CRUCIBLE_PATH_PYTHON3 python3)
  foreach(candidate ${CRUCIBLE_PATH_PYTHON3} /usr/bin/python3)
    execute_process(COMMAND ${candidate} -c "import torch" RESULT_VARIABLE rc OUTPUT_QUIET
                    ERROR_QUIET)
    if(rc EQUAL 0)
      set(CRUCIBLE_PYTHON ${candidate} CACHE FILEPATH
          "Python interpreter with torch for the tests and benchmarks" FORCE)
      break()
    endif()
  endforeach()
endif()
