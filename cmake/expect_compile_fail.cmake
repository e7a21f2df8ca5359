# Runs the compiler on SRC with XTPU_EXPECT_COMPILE_FAIL defined; passes when the compile
# fails and its output names EXPECTED (e.g. "xtpu E101").
execute_process(COMMAND ${CXX} ${FLAGS} -DXTPU_EXPECT_COMPILE_FAIL ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but it must fail with '${EXPECTED}'")
endif()
string(FIND "${out}${err}" "${EXPECTED}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SRC} failed without '${EXPECTED}':\n${out}${err}")
endif()
message(STATUS "failed as expected with '${EXPECTED}'")
