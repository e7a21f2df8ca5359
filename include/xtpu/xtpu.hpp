// xtpu/xtpu.hpp — everything: #include <xtpu/xtpu.hpp>.
//
// Static-shape tensors whose expressions are the graph, compile-time fingerprints, and a lazy
// mark_step() runtime on an emulated TPU. See README.md and docs/.
#pragma once

#include "xtpu/config.hpp"
#include "xtpu/device/device.hpp"
#include "xtpu/dtype/bf16.hpp"
#include "xtpu/dtype/check.hpp"
#include "xtpu/dtype/dtype.hpp"
#include "xtpu/error.hpp"
#include "xtpu/settings.hpp"
#include "xtpu/expr/composite.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/layout.hpp"
#include "xtpu/expr/node.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/cycle_model.hpp"
#include "xtpu/kernels/matmul.hpp"
#include "xtpu/kernels/mxu.hpp"
#include "xtpu/kernels/reference.hpp"
#include "xtpu/kernels/thread_pool.hpp"
#include "xtpu/lazy/program.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/metrics/metrics.hpp"
#include "xtpu/shape/check.hpp"
#include "xtpu/shape/extents.hpp"
