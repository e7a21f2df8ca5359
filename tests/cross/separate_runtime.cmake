# Compiles SRC (tests/cross/runtime_users.cpp) with XTPU_SEPARATE_RUNTIME at -O0 (every function
# the file uses is then in its object) and reads its symbols (NM -C): the runtime's internals
# must not be defined there — only in the one file that includes xtpu/runtime.hpp — and its
# entry points must be called. A template that calls an internal directly brings the runtime's
# compile time back into every file: this test names the symbol.
#   CXX, FLAGS, SRC, NM, WORK_DIR
set(obj ${WORK_DIR}/runtime_users.o)
execute_process(COMMAND ${CXX} ${FLAGS} -O0 -DXTPU_SEPARATE_RUNTIME -c ${SRC} -o ${obj}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CXX} failed on ${SRC}:\n${err}")
endif()
execute_process(COMMAND ${NM} -C ${obj} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${obj}")
endif()
set(symbols "\n${symbols}")
# a regular expression matching text s (the names below have no special characters but parentheses)
function(symbol_regex out s)
  string(REPLACE "(" "\\(" s "${s}")
  set(${out} "${s}" PARENT_SCOPE)
endfunction()
set(problems "")
# internals: defined only in the runtime's file
foreach(internal "xtpu::detail::basic_planner<xtpu::detail::statement>::" "xtpu::detail::step::compiled" "xtpu::detail::step::execute"
                 "xtpu::debug::analysis" "xtpu::detail::differences" "xtpu::trace::detail::recorder::write_locked"
                 "xtpu::mxu::detail::pass_region" "xtpu::detail::chip_registry::chip_registry" "xtpu::detail::step::run("
                 "xtpu::detail::thread_steps::~thread_steps")
  symbol_regex(re "${internal}")
  string(REGEX MATCH "\n[0-9a-f]+ [A-Za-z] ${re}[^\n]*" hit "${symbols}")
  if(hit)
    string(STRIP "${hit}" hit)
    list(APPEND problems "defines ${hit}")
  endif()
endforeach()
# entry points: called, not defined
foreach(entry "xtpu::detail::end_step(" "xtpu::detail::sync(" "xtpu::detail::step::record_erased(" "xtpu::mxu::pass("
              "xtpu::detail::thread_steps::make(" "xtpu::detail::chip_registry::make(")
  symbol_regex(re "${entry}")
  if(NOT symbols MATCHES "\n +U ${re}")
    list(APPEND problems "does not call ${entry}...) as an external symbol")
  endif()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "${SRC} built with XTPU_SEPARATE_RUNTIME:\n  ${text}")
endif()
message(STATUS "separate runtime: ${SRC} defines none of the runtime's internals and calls its entry points")
