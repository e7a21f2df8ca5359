# Runs the compiler on SRC with XTPU_EXPECT_COMPILE_FAIL defined; passes when the compile
# fails with exactly one error and that error names EXPECTED (e.g. "xtpu E101"): an op's
# code, not a cascade of others after it.
execute_process(COMMAND ${CXX} ${FLAGS} -DXTPU_EXPECT_COMPILE_FAIL ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but it must fail with '${EXPECTED}'")
endif()
string(FIND "${out}${err}" "${EXPECTED}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SRC} failed without '${EXPECTED}':\n${out}${err}")
endif()
string(REGEX MATCHALL "error:" errors "${out}${err}")
list(LENGTH errors n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${SRC} failed with '${EXPECTED}' and ${n} errors in all (one expected):\n${out}${err}")
endif()
message(STATUS "failed as expected with '${EXPECTED}' alone")
