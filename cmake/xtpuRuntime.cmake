# xtpu_add_runtime(source): the target xtpu::runtime, the runtime compiled once
# (docs/getting-started.md#the-runtime-compiled-once) — one definition for xtpu's own tree and
# for the installed package (xtpuConfig.cmake). A static library of `source` (a file that
# includes <xtpu/runtime.hpp>), built with the flags of the directory that calls this, when
# something links it; it defines XTPU_SEPARATE_RUNTIME for whoever links it. Outside unity
# builds and precompiled headers: its file must include xtpu first.
function(xtpu_add_runtime source)
  add_library(xtpu_runtime STATIC EXCLUDE_FROM_ALL "${source}")
  add_library(xtpu::runtime ALIAS xtpu_runtime)
  set_target_properties(xtpu_runtime PROPERTIES UNITY_BUILD OFF DISABLE_PRECOMPILE_HEADERS ON)
  target_compile_definitions(xtpu_runtime PUBLIC XTPU_SEPARATE_RUNTIME)
  target_link_libraries(xtpu_runtime PUBLIC xtpu::xtpu)
endfunction()
