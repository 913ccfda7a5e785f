# crucible_shared_libstdcxx(<torch_library> <out_var>)
#
# Sets <out_var> to the libstdc++.so.6 that <torch_library> loads when the C++ compiler has no
# shared libstdc++ (asked for libstdc++.so, it names no file), and to nothing otherwise. Such a
# compiler links its static copy of libstdc++ into every binary, beside the shared one LibTorch
# loads: two copies in one process, and a stream made by one and destroyed by the other aborts
# ("free(): invalid pointer"). Linking <out_var> ahead of the compiler's static copy leaves the
# process one libstdc++. Warns when LibTorch's copy cannot be found.
function(crucible_shared_libstdcxx torch_library out_var)
  set(${out_var} "" PARENT_SCOPE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE compiler_libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${compiler_libstdcxx}")
    return()
  endif()
  execute_process(COMMAND ldd ${torch_library} OUTPUT_VARIABLE torch_ldd ERROR_QUIET)
  string(REGEX MATCH "libstdc\\+\\+\\.so\\.6 => ([^ ]+)" found "${torch_ldd}")
  if(NOT found)
    message(WARNING "${CMAKE_CXX_COMPILER} has no shared libstdc++, and the one LibTorch loads "
                    "was not found (ldd ${torch_library}): the binaries hold a second copy of "
                    "libstdc++ beside LibTorch's; use a compiler with a shared libstdc++")
    return()
  endif()
  message(STATUS "${CMAKE_CXX_COMPILER} has no shared libstdc++: linking LibTorch's "
                 "${CMAKE_MATCH_1}")
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()
