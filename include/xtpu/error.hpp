// xtpu/error.hpp — the run-time error hierarchy.
//
// Provides: xtpu::error (base, derives from std::runtime_error) and the typed errors that
// DESIGN.md §7 names. Compile-time errors are static_asserts (E1xx..E5xx, docs/errors.md);
// these are for what the type system cannot see: host data whose shape is only known at run
// time, memory, threads. Every message names the offending values; a shape in one is written
// by detail::shape_text: "(2, 4)", "()" for a scalar.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace xtpu {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Host data of the wrong run-time shape, e.g. an xt::xarray given to from_host.
class shape_error : public error {
  using error::error;
};
/// An allocation would pass memory_fraction × HBM of the emulated device.
class out_of_memory : public error {
  using error::error;
};
/// A step could not be compiled into a plan.
class compilation_error : public error {
  using error::error;
};
/// A sync point that cannot be honoured, e.g. reading another thread's pending tensor.
class sync_error : public error {
  using error::error;
};
/// An int32 index or label outside its range, found by XTPU_CHECK_INDICES (lazy/index_check.hpp)
/// before the statement reading it was recorded, or by a take or gather (cross_entropy's labels
/// are read by one) as the step ran (thrown by mark_step or the sync point after the step ran
/// to its end).
class index_error : public error {
  using error::error;
};
/// Reading or writing a checkpoint failed.
class checkpoint_error : public error {
  using error::error;
};
/// A data file could not be read: missing, not of its format, truncated or corrupt. The
/// message names the file and the byte offset (of the uncompressed stream) where it went wrong.
class data_error : public error {
  using error::error;
};
/// A collective or a process group failed.
class distributed_error : public error {
  using error::error;
};
/// The requested emulated device (XTPU_DEVICE, or xtpu::device(generation, index)) does not exist.
class device_not_available : public error {
  using error::error;
};
/// An expression reads tensors that live on different emulated devices: move one there first
/// with `t.to(device)` (an explicit transfer).
class device_mismatch : public error {
  using error::error;
};

namespace detail {
/// A shape as every run-time message writes it: "(2, 4)", "(10)", "()".
inline std::string shape_text(std::span<const std::size_t> dims) {
  std::string t = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) t += (i ? ", " : "") + std::to_string(dims[i]);
  return t + ")";
}
}  // namespace detail

}  // namespace xtpu
