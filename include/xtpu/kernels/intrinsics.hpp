// xtpu/kernels/intrinsics.hpp — <immintrin.h> (on x86), included once for every xtpu header
// that uses SIMD intrinsics, directly or through xsimd.
//
// Provides: the x86 intrinsics (nothing of its own). Under g++ 12.2 (Debian 12's) with
// -march=native on an AVX-512 machine, every TU that inlines an intrinsic starting from
// _mm512_undefined_*() (_mm512_sqrt_ps, _mm512_srai_epi32, ...) at -O1 and above gets
// "'__Y' is used uninitialized" from g++'s own AVX-512 header: a false positive about a
// variable that header leaves uninitialized on purpose, and an error under -Werror. The
// warnings carry the header's own locations, so silencing them while the header is read keeps
// every other -Wuninitialized in force. (A file that includes <immintrin.h> before any xtpu
// header reads it there, outside this: include this first, as benchmarks/loops/peers.cpp does.
// g++ 12 does not keep these pragmas in a precompiled header (GCC bug 105593): xtpu's own
// tests that use one are built without the two warnings, cmake/XtpuTesting.cmake.)
#pragma once

#include "xtpu/kernels/cpu.hpp"  // XTPU_X86

#if XTPU_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif
