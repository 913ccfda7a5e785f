# crucible_add_trial(<name> <sources>...)
#
# Builds a trial plugin: a shared library named lib<name>.so that links Crucible and LibTorch and
# that `trainer fit` loads for an entrypoint `<name>:<TrialClass>`. The library is written next
# to the `trainer` binary when built inside the Crucible tree, and beside the caller's other
# outputs otherwise.
function(crucible_add_trial name)
  add_library(${name} SHARED ${ARGN})
  target_link_libraries(${name} PRIVATE crucible::crucible)
  set_target_properties(${name} PROPERTIES PREFIX "lib" CXX_VISIBILITY_PRESET default)
  if(TARGET crucible_pch)
    crucible_use_pch(${name})
  endif()
endfunction()
