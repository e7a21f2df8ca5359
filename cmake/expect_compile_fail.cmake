# Runs the compiler on SRC with XTPU_EXPECT_COMPILE_FAIL defined; passes when the compile
# fails with exactly one error and that error names EXPECTED (e.g. "xtpu E101"): an op's
# code, not a cascade of others after it.
# PCH (optional): the precompiled xtpu.hpp FLAGS read (cmake/XtpuTesting.cmake's xtpu_twins_pch),
# with HEADERS, xtpu's include folder: a header missing or older than one of xtpu's is an error
# that says so (clang++ would fail every twin without a word of it, g++ would test the old text).
if(PCH)
  if(NOT EXISTS "${PCH}")
    message(FATAL_ERROR "${PCH} is missing: build the target xtpu_twins_pch (cmake --build) before ctest")
  endif()
  file(GLOB_RECURSE headers "${HEADERS}/xtpu/*.hpp")
  foreach(h ${headers})
    if(NOT "${PCH}" IS_NEWER_THAN "${h}")
      message(FATAL_ERROR "${PCH} is older than ${h}: build the target xtpu_twins_pch (cmake --build) before ctest")
    endif()
  endforeach()
endif()
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
