# Test helpers: compile-fail twins (Eigen's failtest idea) and header self-containment.

# The include flags a hand-run compiler needs: xtpu's own, then the dependencies' headers.
function(xtpu_compile_flags out)
  # XTPU_NO_AUTODIFF: these check compile-time rules and bits of forward code, not gradients,
  # in about half the compile time (docs/training.md)
  set(flags -std=c++20 -fsyntax-only -DXTPU_NO_AUTODIFF -I${PROJECT_SOURCE_DIR}/include)
  foreach(dep xtensor xsimd xtl)
    get_target_property(dirs ${dep} INTERFACE_INCLUDE_DIRECTORIES)
    foreach(d ${dirs})
      if(NOT d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)  # -isystem /usr/include breaks include_next
        list(APPEND flags -isystem ${d})
      endif()
    endforeach()
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

# compile_fail/NAME.cpp: its first line is `// expect: xtpu EXXX`.
# Adds compile_fail.NAME.ok (builds as-is) and compile_fail.NAME.ko (fails, printing the code).
function(xtpu_add_compile_fail_test src)
  get_filename_component(name ${src} NAME_WE)
  file(STRINGS ${src} first LIMIT_COUNT 1)
  string(REGEX MATCH "xtpu E[0-9]+" expected "${first}")
  if(NOT expected)
    message(FATAL_ERROR "${src}: the first line must be `// expect: xtpu EXXX`")
  endif()
  xtpu_compile_flags(flags)
  add_test(NAME compile_fail.${name}.ok COMMAND ${CMAKE_CXX_COMPILER} ${flags} ${src})
  add_test(NAME compile_fail.${name}.ko
    COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER} "-DFLAGS=${flags}" -DSRC=${src}
            "-DEXPECTED=${expected}" -P ${PROJECT_SOURCE_DIR}/cmake/expect_compile_fail.cmake)
endfunction()

# One object per public header, each including only that header.
function(xtpu_add_header_tests)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/xtpu/*.hpp)
  foreach(h ${headers})
    string(REPLACE "/" "_" stem ${h})
    string(REPLACE ".hpp" ".cpp" stem ${stem})
    set(file ${CMAKE_CURRENT_BINARY_DIR}/headers/${stem})
    file(CONFIGURE OUTPUT ${file} CONTENT "#include <${h}>\n#include <${h}>\n")
    string(REPLACE ".cpp" "" target header_${stem})
    add_library(${target} OBJECT ${file})
    target_link_libraries(${target} PRIVATE xtpu::xtpu xtpu_warnings)
  endforeach()
endfunction()
