# Installs xtpu into a scratch prefix, moves it and removes xtpu's build tree, then configures,
# builds and runs a separate project that finds it with find_package(xtpu CONFIG REQUIRED): one
# program header only (xtpu::xtpu), the same with the runtime compiled once (xtpu::runtime).
set(build ${XTPU_WORK_DIR}/xtpu-build)
set(prefix ${XTPU_WORK_DIR}/prefix)
set(app ${XTPU_WORK_DIR}/app-build)
file(REMOVE_RECURSE ${XTPU_WORK_DIR})
macro(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}")
  endif()
endmacro()
run(${CMAKE_COMMAND} -S ${XTPU_SOURCE_DIR} -B ${build} -DCMAKE_INSTALL_PREFIX=${prefix}
    -DXTPU_BUILD_TESTS=OFF -DXTPU_BUILD_EXAMPLES=OFF -DXTPU_BUILD_BENCHMARKS=OFF)
run(${CMAKE_COMMAND} --install ${build})
# the package must work from wherever it is copied, with xtpu's build tree gone
file(REMOVE_RECURSE ${build})
file(RENAME ${prefix} ${prefix}-moved)
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/project -B ${app} -DCMAKE_PREFIX_PATH=${prefix}-moved
    -DCMAKE_CXX_COMPILER=${XTPU_CXX_COMPILER})
run(${CMAKE_COMMAND} --build ${app})
run(${app}/consumer)
message(STATUS "consumer: ${out}")
run(${app}/consumer_runtime)
message(STATUS "consumer with xtpu::runtime: ${out}")
