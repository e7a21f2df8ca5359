// Host interop: xt::xtensor_fixed (compile-time shapes) and xt::xarray (run-time checked).
#include "reference.hpp"

#include <gtest/gtest.h>

#include <span>
#include <sstream>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

TEST(Interop, FixedRoundTripIsATransfer) {
  xtpu::metrics::reset();
  xt::xtensor_fixed<float, xt::xshape<2, 3>> h{{1, 2, 3}, {4, 5, 6}};
  xtpu::tensor<float, 2, 3> x = xtpu::from_host(h);
  EXPECT_FALSE(x.pending());  // data is on the device at once
  EXPECT_EQ(xtpu::lazy::pending_statements(), 0u);
  EXPECT_TRUE(xtpu::metrics::metric("TransferToDeviceTime").has_value());
  EXPECT_EQ(x.to_host(), h);
  xt::xtensor_fixed<float, xt::xshape<2, 3>> out;
  x.to_host(out);
  EXPECT_EQ(out, h);
}

TEST(Interop, XarrayIsCheckedAtRunTime) {
  xt::xarray<float> good = {{1, 2}, {3, 4}};
  xtpu::tensor<float, 2, 2> x = xtpu::from_host(good);
  EXPECT_EQ(x.to_host()(1, 0), 3.0f);
  xt::xarray<float> bad = {{1, 2, 3}, {4, 5, 6}};
  try {
    xtpu::tensor<float, 2, 2> y = xtpu::from_host(bad);
    ADD_FAILURE() << "expected shape_error";
  } catch (const xtpu::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected shape (2, 2), got (2, 3)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x.to_host()(0, 1), 2.0f);  // nothing lost
}

TEST(Interop, PrintingIsASync) {
  xtpu::metrics::reset();
  xt::xtensor_fixed<std::int32_t, xt::xshape<2, 2>> h{{1, 2}, {3, 4}};
  xtpu::tensor<std::int32_t, 2, 2> y = xtpu::from_host(h) * 2;
  std::ostringstream os;
  os << y;
  EXPECT_EQ(os.str(), "tensor<s32, 2, 2> {{2, 4}, {6, 8}}");
  std::ostringstream bs;
  bs << xtpu::full<xtpu::bf16, 2>(xtpu::bf16(1.5f)) << " " << xtpu::tensor<bool, 1>(xtpu::full<bool, 1>(true))
     << " " << xtpu::full<float>(0.25f);
  EXPECT_EQ(bs.str(), "tensor<bf16, 2> {1.5, 1.5} tensor<pred, 1> {true} tensor<f32> 0.25");
  EXPECT_EQ(xtpu::metrics::counter("SyncPoints"), 4);  // one per tensor printed
}

TEST(Interop, Bf16AndBoolTensors) {
  xt::xtensor_fixed<xtpu::bf16, xt::xshape<2>> h{xtpu::bf16(1.5f), xtpu::bf16(-2.0f)};
  xtpu::tensor<xtpu::bf16, 2> x = xtpu::from_host(h);
  xtpu::tensor<bool, 2> pos = x > 0.0f;
  EXPECT_EQ(x.to_host()(1).bits(), 0xC000);
  EXPECT_TRUE(pos.to_host()(0));
  EXPECT_FALSE(pos.to_host()(1));
  xtpu::tensor<float> scalar = xtpu::sum(xtpu::cast<float>(x));
  EXPECT_EQ(scalar.item(), -0.5f);
}

TEST(Interop, DefaultTensorIsZeros) {
  xtpu::tensor<float, 3> z;
  EXPECT_FALSE(z.pending());
  EXPECT_EQ(z.to_host()(2), 0.0f);
}

TEST(Interop, PointerAndSpanAreCheckedAtRunTime) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  xtpu::tensor<float, 2, 3> a = xtpu::from_host<float, 2, 3>(v.data(), v.size());
  EXPECT_FALSE(a.pending());
  EXPECT_EQ(a.to_host()(1, 2), 6.0f);
  auto b = xtpu::from_host<float, 3, 2>(std::span<const float>(v));
  EXPECT_EQ(b.to_host()(2, 0), 5.0f);
  try {
    (void)xtpu::from_host<float, 2, 2>(v.data(), v.size());
    ADD_FAILURE() << "expected shape_error";
  } catch (const xtpu::shape_error& e) {
    EXPECT_STREQ(e.what(), "xtpu: from_host: expected 4 elements for shape (2, 2), got 6");
  }
}

TEST(Interop, AdaptViewsAndXtensorsOfAnyLayout) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  // a non-owning view of the vector (an rvalue: the proxy holds the view, not a dangling pointer)
  xtpu::tensor<float, 2, 3> rm = xtpu::from_host(xt::adapt(v, std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(rm.to_host()(1, 0), 4.0f);
  // column-major memory: copied to row-major order on the way
  xtpu::tensor<float, 2, 3> cm =
      xtpu::from_host(xt::adapt<xt::layout_type::column_major>(v, std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(cm.to_host()(1, 0), 2.0f);
  EXPECT_EQ(cm.to_host()(0, 1), 3.0f);
  const xt::xtensor<float, 2> t = {{7, 8}, {9, 10}};
  xtpu::tensor<float, 2, 2> x = xtpu::from_host(t);
  EXPECT_EQ(x.to_host()(1, 1), 10.0f);
  xtpu::tensor<float, 2> col = xtpu::from_host(xt::view(t, xt::all(), 1));  // a strided view
  EXPECT_EQ(col.to_host()(1), 10.0f);
  xtpu::tensor<float, 2> row = xtpu::from_host(xt::view(t, 1));  // contiguous, but not at the start
  EXPECT_EQ(row.to_host()(0), 9.0f);
  EXPECT_EQ(row.to_host()(1), 10.0f);
  EXPECT_THROW((xtpu::tensor<float, 3, 2>(xtpu::from_host(t))), xtpu::shape_error);
}
