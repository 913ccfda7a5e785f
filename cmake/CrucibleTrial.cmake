# crucible_add_trial(<name> <sources>...)
#
# Builds a trial plugin: a shared library named lib<name>.so that links Crucible and LibTorch and
# that `trainer fit` loads for an entrypoint `<name>:<TrialClass>`. The library is written next
# to the `trainer` binary when built inside the Crucible tree, and beside the caller's other
# outputs otherwise. A project that sets no CMAKE_BUILD_TYPE (with a single-configuration
# generator, which would compile without optimization) gets the trial compiled with the Release
# flags, and a configure-time line saying so.
function(crucible_add_trial name)
  add_library(${name} SHARED ${ARGN})
  target_link_libraries(${name} PRIVATE crucible::crucible)
  set_target_properties(${name} PROPERTIES PREFIX "lib" CXX_VISIBILITY_PRESET default)
  get_property(multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(NOT multi_config AND NOT CMAKE_BUILD_TYPE)
    separate_arguments(release_flags UNIX_COMMAND "${CMAKE_CXX_FLAGS_RELEASE}")
    target_compile_options(${name} PRIVATE ${release_flags})
    message(STATUS "crucible_add_trial(${name}): no CMAKE_BUILD_TYPE; compiling it with the "
                   "Release flags (${CMAKE_CXX_FLAGS_RELEASE})")
  endif()
  if(TARGET crucible_pch)
    crucible_use_pch(${name})
  endif()
endfunction()
