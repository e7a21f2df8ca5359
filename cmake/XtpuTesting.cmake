# Test helpers: compile-fail twins (Eigen's failtest idea), header self-containment and the
# precompiled headers of xtpu's own programs.

# Compiles TARGET with HEADERS precompiled, shared by every target of GROUP (XTPU_PCH): the first
# target of a group builds the header, the others reuse it, so a group's targets must be
# compiled with the same options and the same value of every macro the headers read (CMake
# passes -Winvalid-pch: g++ would otherwise parse the headers again in silence; clang++ refuses
# a header built with another value). Parsing xtpu.hpp and its dependencies is 4-6 s of every
# file (docs/architecture.md). A file of a group sees all of xtpu.hpp whatever it includes.
function(xtpu_use_pch target group)
  if(NOT XTPU_PCH)
    return()
  endif()
  # g++ 12 does not keep `#pragma GCC diagnostic` in a precompiled header, so the pragmas with
  # which kernels/intrinsics.hpp reads <immintrin.h> (its false "'__Y' is used uninitialized",
  # GCC bug 105593) are lost: -W(maybe-)uninitialized are off in g++'s files that use one. The
  # examples build without one under g++ (examples/CMakeLists.txt), so g++'s check still sees
  # every loop they and the benchmarks instantiate; clang++ checks the tests. clang++ leaves
  # the header's time out of it: ccache caches the files that use it only then.
  target_compile_options(${target} PRIVATE "$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized;-Wno-maybe-uninitialized>"
                         "$<$<CXX_COMPILER_ID:Clang>:SHELL:-Xclang -fno-pch-timestamp>")
  get_property(host GLOBAL PROPERTY xtpu_pch_${group})
  if(host)
    target_precompile_headers(${target} REUSE_FROM ${host})
  else()
    target_precompile_headers(${target} PRIVATE ${ARGN})
    set_property(GLOBAL PROPERTY xtpu_pch_${group} ${target})
  endif()
endfunction()

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
# Adds compile_fail.NAME.ko (compiled with XTPU_EXPECT_COMPILE_FAIL: fails, printing the code)
# for each file, and one compile_fail.ok that compiles the files as-is in one translation unit,
# each in a namespace of its own: one parse of xtpu.hpp instead of one per file (g++: 12 s for
# 38 files, where one file took ~5.8 s). Every #include line is hoisted above the namespaces,
# so a file whose meaning would change — one that uses BOOST_HANA_ADAPT_STRUCT (global scope
# only), #defines, #undefs or #pragmas anything, or indents an #include — gets an .ok of its
# own. (An #include inside an #if at column 0 would be hoisted too: keep includes unconditional.)
#
# With XTPU_PCH the .ko compiles read xtpu.hpp precompiled (xtpu_twins_pch below): parsing it was
# most of each one (g++ 12: 6.1 -> 2.2 s of CPU a twin, clang++ 14: 4.6 -> 1.3 s). Not a file
# with a #define, #undef or #pragma anywhere (it would come after the header, not before) or
# without `#include <xtpu/xtpu.hpp>` at column 0 (one that checks a header of its own): those
# parse the text.
function(xtpu_add_compile_fail_tests)
  xtpu_compile_flags(flags)
  xtpu_twins_pch(pch_flags pch_file)
  set(includes "")
  set(bodies "")
  foreach(src ${ARGN})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
    get_filename_component(name ${src} NAME_WE)
    file(STRINGS ${src} first LIMIT_COUNT 1)
    string(REGEX MATCH "xtpu E[0-9]+" expected "${first}")
    if(NOT expected)
      message(FATAL_ERROR "${src}: the first line must be `// expect: xtpu EXXX`")
    endif()
    # what would change the file's meaning if something came before it (a precompiled header) or
    # around it (compile_fail.ok's namespace)
    file(STRINGS ${src} directives REGEX "^[ \t]*#[ \t]*(define|undef|pragma)")
    file(STRINGS ${src} placed REGEX "BOOST_HANA_ADAPT_STRUCT|^[ \t]+#[ \t]*include")
    file(STRINGS ${src} whole REGEX "^#include <xtpu/xtpu.hpp>")
    set(ko_flags ${flags})
    set(ko_pch "")
    if(pch_flags AND whole AND NOT directives)
      list(APPEND ko_flags ${pch_flags})
      set(ko_pch ${pch_file})
    endif()
    add_test(NAME compile_fail.${name}.ko
      COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER} "-DFLAGS=${ko_flags}" -DSRC=${src}
              -DPCH=${ko_pch} -DHEADERS=${PROJECT_SOURCE_DIR}/include
              "-DEXPECTED=${expected}" -P ${PROJECT_SOURCE_DIR}/cmake/expect_compile_fail.cmake)
    if(directives OR placed)
      add_test(NAME compile_fail.${name}.ok COMMAND ${CMAKE_CXX_COMPILER} ${flags} ${src})
      continue()
    endif()
    file(STRINGS ${src} lines REGEX "^#include ")
    list(APPEND includes ${lines})
    string(APPEND bodies "namespace compile_fail_${name} {  // int main() here is an ordinary function\n#include \"${src}\"\n}\n")
  endforeach()
  list(REMOVE_DUPLICATES includes)
  list(JOIN includes "\n" includes)
  set(file ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_ok.cpp)
  file(CONFIGURE OUTPUT ${file} CONTENT "${includes}\n${bodies}int main() {}\n")
  add_test(NAME compile_fail.ok COMMAND ${CMAKE_CXX_COMPILER} ${flags} -Wno-return-type ${file})
endfunction()

# xtpu.hpp precompiled with the twins' flags (xtpu_compile_flags), built with everything else
# (target xtpu_twins_pch), again when any header it read changes (xtpu's, the dependencies': the
# compiler's depfile); FLAGS_OUT: the flags that read it, FILE_OUT: the header's file (both empty
# without XTPU_PCH). A twin adds XTPU_EXPECT_COMPILE_FAIL, which no header reads: g++ and
# clang++ accept the header built without it. A ko test fails, saying so, when the header is missing or older than one of xtpu's
# (expect_compile_fail.cmake: g++ checks no header's time and would test the old text; clang++
# refuses it, and a missing one, with an error every twin would print); g++ with -Winvalid-pch
# parses the text when the header is unusable for another reason.
function(xtpu_twins_pch flags_out file_out)
  set(${flags_out} "" PARENT_SCOPE)
  set(${file_out} "" PARENT_SCOPE)
  if(NOT XTPU_PCH)
    return()
  endif()
  xtpu_compile_flags(flags)
  list(REMOVE_ITEM flags -fsyntax-only)
  set(header ${CMAKE_CURRENT_BINARY_DIR}/twins_pch/xtpu_twins.hpp)
  file(CONFIGURE OUTPUT ${header} CONTENT "#include <xtpu/xtpu.hpp>\n")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(pch ${header}.pch)
    set(use -include-pch ${pch})
  else()
    set(pch ${header}.gch)
    set(use -include ${header} -Winvalid-pch)
  endif()
  add_custom_command(OUTPUT ${pch}
    COMMAND ${CMAKE_CXX_COMPILER} ${flags} -MD -MT ${pch} -MF ${pch}.d -x c++-header ${header} -o ${pch}
    DEPENDS ${header} DEPFILE ${pch}.d
    COMMENT "Precompiling xtpu.hpp for the compile-fail twins" VERBATIM)
  add_custom_target(xtpu_twins_pch ALL DEPENDS ${pch})
  set(${flags_out} ${use} PARENT_SCOPE)
  set(${file_out} ${pch} PARENT_SCOPE)
endfunction()

# One object per public header, each including only that header.
function(xtpu_add_header_tests)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/xtpu/*.hpp)
  # (xtpu/runtime.hpp is the file of the xtpu::runtime library, which every build compiles)
  list(REMOVE_ITEM headers xtpu/runtime.hpp)
  foreach(h ${headers})
    string(REPLACE "/" "_" stem ${h})
    string(REPLACE ".hpp" ".cpp" stem ${stem})
    set(file ${CMAKE_CURRENT_BINARY_DIR}/headers/${stem})
    file(CONFIGURE OUTPUT ${file} CONTENT "#include <${h}>\n#include <${h}>\n")
    string(REPLACE ".cpp" "" target header_${stem})
    add_library(${target} OBJECT ${file})
    target_link_libraries(${target} PRIVATE xtpu::xtpu xtpu_warnings)
    if(h MATCHES "^xtpu/dist/")  # (<mpi.h>: tests/CMakeLists.txt finds MPI first)
      target_link_libraries(${target} PRIVATE MPI::MPI_CXX)
    endif()
  endforeach()
endfunction()
