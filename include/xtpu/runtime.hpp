// xtpu/runtime.hpp — the definitions of the runtime's entry points, for a program built with
// XTPU_SEPARATE_RUNTIME defined (xtpu/config.hpp): exactly one file of the program includes
// this header, before any other xtpu header. The CMake target xtpu::runtime is that file.
// Error: #error when another xtpu header came first (its entry points would stay undefined).
#pragma once

#ifdef XTPU_VERSION_MAJOR
#error "xtpu/runtime.hpp must be the first xtpu header of its file"
#endif
#ifndef XTPU_SEPARATE_RUNTIME
#error "xtpu/runtime.hpp defines the runtime of a program built with XTPU_SEPARATE_RUNTIME: define it for every file"
#endif
#define XTPU_RUNTIME_SOURCE
#include "xtpu/xtpu.hpp"
