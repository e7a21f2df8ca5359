# xtpu_add_runtime(source [NAME name] [DEFINITIONS defs...]): the target xtpu::runtime (or
# xtpu::<name>), the runtime compiled once (docs/getting-started.md#the-runtime-compiled-once) —
# one definition for xtpu's own tree and for the installed package (xtpuConfig.cmake). A static
# library of `source` (a file that includes <xtpu/runtime.hpp>), built with the flags of the
# directory that calls this, when something links it; it defines XTPU_SEPARATE_RUNTIME and
# `defs` for whoever links it (a macro that changes xtpu's headers, XTPU_ALL_LOOP_WIDTHS=1,
# must be the same in every file of a program: the runtime's too). Outside unity builds and
# precompiled headers: its file must include xtpu first.
function(xtpu_add_runtime source)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "NAME" "DEFINITIONS")
  if(NOT arg_NAME)
    set(arg_NAME runtime)
  endif()
  set(target xtpu_${arg_NAME})
  add_library(${target} STATIC EXCLUDE_FROM_ALL "${source}")
  add_library(xtpu::${arg_NAME} ALIAS ${target})
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF DISABLE_PRECOMPILE_HEADERS ON)
  target_compile_definitions(${target} PUBLIC XTPU_SEPARATE_RUNTIME ${arg_DEFINITIONS})
  target_link_libraries(${target} PUBLIC xtpu::xtpu)
endfunction()
