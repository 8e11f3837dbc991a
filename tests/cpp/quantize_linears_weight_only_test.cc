#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/float16.h"
#include "kernels/int4_weight_mm.h"
#include "kernels/int8_weight_mm.h"
#include "norm_fixtures.h"
#include "passes/quantize_linears_weight_only.h"

namespace fxopt {
namespace {

const std::string kSig = "QuantizeLinearsWeightOnly-test";

class QuantizeLinearsWeightOnlyTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(std::string activation, bool reverse = false, int bits = 8,
                   Chooser& chooser = static_chooser(), int64_t group_size = 4) {
    return run_pass(
        QuantizeLinearsWeightOnly(std::move(activation), Opaque{5}, Opaque{6}, bits, group_size),
        program, edits, ops, kSig, reverse, chooser);
  }
};

// Answers every query with its first candidate named with `prefix`: "fxopt_" for fxopt's own
// kernels, "int" for ATen's ("int8_weight_only", "int4_weight_only").
class PrefixChooser final : public Chooser {
 public:
  explicit PrefixChooser(std::string prefix) : prefix_(std::move(prefix)) {}
  KernelChoice choose(const ChoiceQuery& query) override {
    auto picked = std::find_if(query.candidates.begin(), query.candidates.end(),
                               [&](const std::string& c) { return c.starts_with(prefix_); });
    return {size_t(picked - query.candidates.begin()), 0.5, "fixed"};
  }

 private:
  std::string prefix_;
};

TEST_F(QuantizeLinearsWeightOnlyTest, AtenLinearWithBiasReadsInt8WeightsAndReversesExactly) {
  attribute("w", {4, 8});
  attribute("bias", {4});
  TensorInfo x_value = input({5, 8});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {5, 8});
  Node* w = b.attr("w", "w");
  Node* bias = b.attr("bias", "bias");
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, w, bias})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PrefixChooser atens("int");
  PassResult forward = apply("float32", false, 8, atens);
  ASSERT_EQ(forward.changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._weight_int8pack_mm.default"), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.add.Tensor"), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._to_copy.default"), 0u);  // float32: no casts
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.reshape.default"), 0u);   // 2-D: no reshapes
  EXPECT_EQ(count(NodeKind::GetAttr, "w"), 0u);  // the float weight is no longer read
  // The weight is stored once as int8 [N, K] (the kernel's layout), the original stays.
  const TensorInfo& values = program.attributes.at("w_int8wo");
  EXPECT_EQ(values.dtype, "int8");
  EXPECT_EQ(values.shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(program.attributes.at("w_int8wo_scale").shape, std::vector<int64_t>{4});
  EXPECT_TRUE(program.attributes.contains("w"));
  auto after = run({{"x", x_value}});
  double error = max_diff(before, after);
  EXPECT_GT(error, 0.0);  // it did quantize
  EXPECT_LT(error, 0.05);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply("float32", /*reverse=*/true, 8, atens);
  EXPECT_EQ(backward.changed.size(), 1u);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("w_int8wo"));
  EXPECT_FALSE(program.attributes.contains("w_int8wo_scale"));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(QuantizeLinearsWeightOnlyTest, BFloat16On3dInputCastsAndReadsSizesOnEveryCall) {
  linear_module("fc", 16, 8, true);
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 16});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto graph_before = structure();

  ASSERT_EQ(apply("bfloat16").changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallModule, "fc"), 0u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._to_copy.default"), 2u);  // in and out
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.reshape.default"), 2u);   // flatten, unflatten
  // Leading sizes follow the input (never the recorded 2 and 3): one graph for every length.
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.sym_size.int"), 2u);
  EXPECT_EQ(program.attributes.at("fc.weight_int8wo_scale").dtype, "bfloat16");
  EXPECT_TRUE(program.graph.lint().empty());

  apply("bfloat16", /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("fc.weight_int8wo"));
}

TEST_F(QuantizeLinearsWeightOnlyTest, FxoptsKernelTakesFloat32WithoutCastsAndReversesExactly) {
  linear_module("fc", 48, 7, true);  // 7 outputs: a block of 4 rows and 3 single rows
  TensorInfo x_value = input({2, 3, 48});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 48});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PrefixChooser chooser("fxopt_");
  ASSERT_EQ(apply("bfloat16", false, 8, chooser).changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "fxopt.runtime.int8_weight_linear.int8_weight_linear"),
            1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._weight_int8pack_mm.default"), 0u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._to_copy.default"), 0u);  // float32 throughout
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.reshape.default"), 0u);   // x of any rank
  EXPECT_EQ(program.attributes.at("fc.weight_int8wo_scale").dtype, "float32");
  double error = max_diff(before, run({{"x", x_value}}));
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.05);
  EXPECT_TRUE(program.graph.lint().empty());

  apply("bfloat16", /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST(Int8WeightMm, MatchesAPlainLoopOffItsBlocks) {
  // 3 rows, n = 9 (two blocks of 4 and one row); k = 40: two vectors of 16 and a tail of 8 (five
  // vectors of 8 with AVX2), k = 37: tails of 5 in both.
  for (int64_t k : {40, 37}) {
    const int64_t rows = 3, n = 9;
    std::vector<float> x(rows * k), scale(n), y(rows * n);
    std::vector<int8_t> w(n * k);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) / 7.0f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = int8_t(int(i * 37 % 255) - 127);
    for (int64_t j = 0; j < n; ++j) scale[j] = 0.01f * float(j + 1);
    int8_weight_mm(x.data(), rows, k, w.data(), scale.data(), n, y.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += double(x[r * k + i]) * w[j * k + i];
        EXPECT_NEAR(y[r * n + j], scale[j] * sum, 1e-4)
            << "k " << k << ", row " << r << ", output " << j;
      }
  }
}

TEST_F(QuantizeLinearsWeightOnlyTest, WithoutMeasurementsFloat32ActivationsTakeFxoptsKernel) {
  // ATen's kernel with float32 activations is 4-5x slower than a float32 Linear; fxopt's takes
  // them as they are. With bfloat16 ones ATen's stays the static choice.
  attribute("w", {4, 16});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {5, 16});
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, b.attr("w", "w")})}});
  ASSERT_EQ(apply("float32").changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "fxopt.runtime.int8_weight_linear.int8_weight_linear"),
            1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._weight_int8pack_mm.default"), 0u);
  apply("float32", /*reverse=*/true);
  ASSERT_EQ(apply("bfloat16").changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._weight_int8pack_mm.default"), 1u);
}

TEST_F(QuantizeLinearsWeightOnlyTest, Int4GroupsReadTheInt4KernelAndReverseExactly) {
  attribute("w", {16, 8});  // out_features a multiple of 16, in_features of the group size 4
  TensorInfo x_value = input({3, 8});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {3, 8});
  Node* w = b.attr("w", "w");
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, w})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  ASSERT_EQ(apply("float32", false, 4).changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._weight_int4pack_mm_for_cpu.default"), 1u);
  EXPECT_EQ(program.attributes.at("w_int4wo_scale_zeros").shape,
            (std::vector<int64_t>{2, 16, 2}));  // [K / group, N, (scale, zero)]
  double error = max_diff(before, run({{"x", x_value}}));
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.2);  // 16 levels per group of 4

  apply("float32", /*reverse=*/true, 4);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("w_int4wo"));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(QuantizeLinearsWeightOnlyTest, Int4SkipsShapesNeitherKernelTakes) {
  attribute("w", {8, 8});  // 8 outputs: not ATen's tiles of 16; groups of 4: not fxopt's 32
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {3, 8});
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, b.attr("w", "w")})}});
  PassResult result = apply("float32", false, 4);
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 1u);
  EXPECT_EQ(result.skipped[0].reason,
            "int4: its out_features 8 is not a multiple of 16 (ATen's packing) and the group "
            "size 4 not of 32 (fxopt's kernel)");
}

TEST_F(QuantizeLinearsWeightOnlyTest, BFloat16SkipsInFeaturesTheKernelReadsWrong) {
  attribute("w", {8, 24});  // 24 inputs: not a multiple of 16
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {3, 24});
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, b.attr("w", "w")})}});
  auto graph_before = structure();
  PassResult result = apply("bfloat16");
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 1u);
  EXPECT_EQ(result.skipped[0].reason,
            "its in_features 24 is not a multiple of 16, which ATen's int8 kernel needs with "
            "bfloat16 activations");
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(apply("float32").changed.size(), 1u);  // float32 activations: any size
}

TEST_F(QuantizeLinearsWeightOnlyTest, SkipsHalfPrecisionAndUnknownRankLinears) {
  linear_module("half", 4, 4, true, "float16");
  linear_module("unknown", 4, 4, true);
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 4});
  Node* y = b.input("y");  // no recorded facts
  b.output(Tuple{{b.module("half", "half", {x}), b.module("unknown", "unknown", {y})}});
  auto graph_before = structure();

  PassResult result = apply("bfloat16");
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason, "its weight is float16, not float32");
  EXPECT_EQ(result.skipped[1].reason.find("the rank of its input is not known"), 0u);
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(QuantizeLinearsWeightOnlyTest, OptionsAreChecked) {
  EXPECT_THROW(QuantizeLinearsWeightOnly::from_options(Dict{}), std::invalid_argument);
  EXPECT_THROW(QuantizeLinearsWeightOnly::from_options(Dict{{{"activation", "bfloat16"}}}),
               std::invalid_argument);
  EXPECT_THROW(QuantizeLinearsWeightOnly::from_options(Dict{{{"activation", "int4"}}}),
               std::invalid_argument);
  EXPECT_THROW(QuantizeLinearsWeightOnly::from_options(
                   Dict{{{"activation", "float32"}, {"bits", int64_t{3}}}}),
               std::invalid_argument);
  EXPECT_NE(QuantizeLinearsWeightOnly::from_options(Dict{{{"activation", "float32"}}}), nullptr);
}

TEST_F(QuantizeLinearsWeightOnlyTest, FxoptsInt4KernelTakesFloat32AndReversesExactly) {
  linear_module("fc", 64, 6, false);  // 6 outputs: ATen's kernel (tiles of 16) could not take it
  TensorInfo x_value = input({2, 3, 64});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 64});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PrefixChooser chooser("fxopt_");
  ASSERT_EQ(apply("bfloat16", false, 4, chooser, 32).changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "fxopt.runtime.int4_weight_linear.int4_weight_linear"),
            1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten._to_copy.default"), 0u);  // float32 throughout
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.reshape.default"), 0u);   // x of any rank
  // Each row's scales, then its minimums, per group of 32 columns.
  EXPECT_EQ(program.attributes.at("fc.weight_int4wo_scale_zeros").shape,
            (std::vector<int64_t>{6, 2, 2}));
  double error = max_diff(before, run({{"x", x_value}}));
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.2);
  EXPECT_TRUE(program.graph.lint().empty());

  apply("bfloat16", /*reverse=*/true, 4, chooser, 32);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

// The plain definition of the int4 kernel: each row of x rounded to int8 with its own scale
// (max|x| / 127) times q * scale per group, plus the minimums times the group sums of x itself;
// column c of row j being q[j][c].
std::vector<double> int4_by_definition(const std::vector<float>& x, int64_t rows, int64_t k,
                                       const std::vector<uint8_t>& q,
                                       const std::vector<uint16_t>& halves, int64_t group,
                                       int64_t n) {
  std::vector<double> p(halves.size());
  std::transform(halves.begin(), halves.end(), p.begin(), half_to_float);
  int64_t groups = k / group;
  std::vector<double> y(size_t(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    float largest = 0.0f;
    for (int64_t i = 0; i < k; ++i) largest = std::max(largest, std::fabs(x[r * k + i]));
    double step = largest / 127.0;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) {
        double rounded =
            largest > 0.0f ? step * std::nearbyint(x[r * k + i] * (127.0f / largest)) : 0.0;
        y[r * n + j] += rounded * q[j * k + i] * p[(j * 2) * groups + i / group] +
                        double(x[r * k + i]) * p[(j * 2 + 1) * groups + i / group];
      }
  }
  return y;
}

// x [rows, k], q and params of n channels with values that vary along every dimension.
struct Int4Case {
  int64_t rows, k, group, n;
  std::vector<float> x;
  std::vector<uint16_t> params;  // float16
  std::vector<uint8_t> q, packed;

  Int4Case(int64_t rows_, int64_t k_, int64_t group_, int64_t n_)
      : rows(rows_),
        k(k_),
        group(group_),
        n(n_),
        x(rows * k),
        params(n * 2 * (k / group)),
        q(n * k),
        packed(n * k / 2) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) / 7.0f;
    for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i * 7 % 16);
    for (size_t i = 0; i < params.size(); ++i)
      params[i] = float_to_half(0.01f * float(int(i % 11) - 5));
    int4_pack_rows(q.data(), n, k, packed.data());
  }

  std::vector<float> run(int threads) const {
    std::vector<float> y(rows * n);
    int4_weight_mm(x.data(), rows, k, packed.data(), params.data(), group, n, y.data(), threads);
    return y;
  }

  void expect_definition(const std::vector<float>& y) const {
    std::vector<double> expected = int4_by_definition(x, rows, k, q, params, group, n);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-4) << "at " << i;
  }
};

TEST(Int4WeightMm, MatchesItsDefinitionAtEveryThreadCount) {
  // 3 rows, k = 128 in groups of 64 (two runs of 32 each), n = 40003: blocks of 8 (AVX-512) or
  // 4 (AVX2) and a tail of 3, enough weight bytes (3.2 MB of int4, 5.1 MB of int8) that two threads share the parts.
  Int4Case c(3, 128, 64, 40003);
  std::vector<float> y = c.run(1);
  c.expect_definition(y);
  // Split over threads: each channel computed by one thread, in the same order.
  EXPECT_EQ(y, c.run(2));
  std::vector<int8_t> w(c.n * c.k, 3);
  std::vector<float> scale(c.n, 0.5f), y8(c.rows * c.n), y8_split(c.rows * c.n);
  int8_weight_mm(c.x.data(), c.rows, c.k, w.data(), scale.data(), c.n, y8.data(), 1);
  int8_weight_mm(c.x.data(), c.rows, c.k, w.data(), scale.data(), c.n, y8_split.data(), 2);
  EXPECT_EQ(y8, y8_split);
}

TEST(Int4WeightMm, MatchesItsDefinitionForEveryGroupAndPartialBlock) {
  // Groups of 32 (four scales per 128 columns in one load; k up to 1088) and of 96 and 160 (one
  // per run); k past the last whole 128 columns by 32, 64 and 96; one or two activation rows;
  // 13 channels: a block of 8, one of 4 and a single one.
  for (auto [k, group] : std::vector<std::pair<int64_t, int64_t>>{{128, 32},
                                                                  {160, 32},
                                                                  {192, 32},
                                                                  {224, 32},
                                                                  {768, 32},
                                                                  {544, 32},
                                                                  {1088, 32},
                                                                  {96, 96},
                                                                  {480, 160}}) {
    SCOPED_TRACE("k " + std::to_string(k) + ", group " + std::to_string(group));
    for (int64_t rows : {1, 2}) {
      Int4Case c(rows, k, group, 13);
      c.expect_definition(c.run(1));
    }
  }
}

TEST(Int4WeightMm, AZeroActivationRowGivesZero) {
  Int4Case c(2, 256, 32, 8);
  std::fill(c.x.begin(), c.x.begin() + c.k, 0.0f);
  std::vector<float> y = c.run(1);
  for (int64_t j = 0; j < c.n; ++j) EXPECT_EQ(y[j], 0.0f) << "channel " << j;
  c.expect_definition(y);
}

TEST(Float16, RoundsToNearestEvenAndRoundTripsEveryHalf) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);               // the largest half
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);               // halfway past it: infinity
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);     // a tie, to the even mantissa
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);     // a tie, up to the even one
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // half of it: a tie, to zero
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (!nan) ASSERT_EQ(float_to_half(half_to_float(uint16_t(h))), h) << "half " << h;
  }
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.0f, -24));
}

}  // namespace
}  // namespace fxopt
