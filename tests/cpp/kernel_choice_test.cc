// How passes follow the kernel chooser (tuning/chooser.h): the answer decides the rewrite, the
// query carries the op's shape, and every answer is reported.
#include <gtest/gtest.h>

#include "fixed_chooser.h"
#include "norm_fixtures.h"
#include "passes/fuse_linear_activation_onednn.h"
#include "passes/quantize_linears_int8.h"
#include "passes/quantize_linears_weight_only.h"

namespace fxopt {
namespace {

using testing::FixedChooser;

const std::string kSig = "KernelChoice-test";

class KernelChoiceTest : public ::testing::Test, public testing::NormFixture {
 public:
  // x [2, 3, 4] -> linear (4 -> 6) -> gelu -> output
  void build_linear_gelu(int64_t in_features = 4) {
    attribute("fc.weight", {6, in_features});
    attribute("fc.bias", {6});
    Node* x = b.input("x");
    Node* w = b.attr("fc_weight", "fc.weight");
    Node* bias = b.attr("fc_bias", "fc.bias");
    Node* fc = b.call("linear", "aten.linear.default", {x, w, bias});
    b.output(Tuple{{b.call("gelu", "aten.gelu.default", {fc})}});
    program.graph.set_value_info(x, "float32", {2, 3, in_features});
  }
  PassResult fuse(Chooser& chooser, bool reverse = false) {
    return run_pass(FuseLinearActivationOneDnn({"float32"}), program, edits, ops, kSig, reverse,
                    chooser);
  }
  size_t count(std::string_view target) const {
    size_t n = 0;
    for (const Node* node : program.graph) n += node->target().str() == target;
    return n;
  }
  TensorInfo x_ = input({2, 3, 4});
};

TEST_F(KernelChoiceTest, TheQueryCarriesTheLinearsShapeAndCandidates) {
  build_linear_gelu();
  FixedChooser chooser("onednn_fused");
  PassResult result = fuse(chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  const ChoiceQuery& q = chooser.queries[0];
  EXPECT_EQ(q.op, "linear");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{6, 4, 6}));  // tokens = 2 * 3
  EXPECT_EQ(q.dtype, "float32");
  EXPECT_EQ(q.variant, "gelu");
  EXPECT_EQ(q.value, "x");
  EXPECT_EQ(q.candidates, (std::vector<std::string>{"aten", "onednn", "onednn_fused"}));
  EXPECT_EQ(q.fallback, 2u);
  ASSERT_EQ(result.choices.size(), 1u);
  EXPECT_EQ(result.choices[0].node, "linear");
  EXPECT_EQ(result.choices[0].picked, "onednn_fused");
  EXPECT_EQ(result.choices[0].ratio, 0.5);
  EXPECT_EQ(result.choices[0].how, "fixed");
}

TEST_F(KernelChoiceTest, AtenLeavesTheGraphAlone) {
  build_linear_gelu();
  auto graph_before = structure();
  FixedChooser chooser("aten");
  PassResult result = fuse(chooser);
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 1u);
  EXPECT_NE(result.skipped[0].reason.find("measured faster"), std::string::npos);
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(KernelChoiceTest, UnfusedOneDnnKeepsTheActivationAndReversesExactly) {
  build_linear_gelu();
  auto graph_before = structure();
  auto before = run({{"x", x_}});
  FixedChooser chooser("onednn");
  PassResult result = fuse(chooser);
  EXPECT_EQ(result.changed.size(), 1u);
  EXPECT_EQ(count("fxopt.runtime.onednn_linear.linear_pointwise"), 1u);
  EXPECT_EQ(count("aten.gelu.default"), 1u);
  Node* fused = program.graph.find_by_name("linear_pointwise");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->args()[3], Arg("none"));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  fuse(chooser, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// A Linear without bias is named so once in the query's variant (the cache's key, the
// candidates' operands).
TEST_F(KernelChoiceTest, TheVariantNamesAMissingBiasOnce) {
  attribute("fc.weight", {6, 4});
  Node* x = b.input("x");
  Node* fc = b.call("linear", "aten.linear.default", {x, b.attr("fc_weight", "fc.weight")});
  b.output(Tuple{{b.call("relu", "aten.relu.default", {fc})}});
  program.graph.set_value_info(x, "float32", {2, 3, 4});
  FixedChooser chooser("onednn_fused");
  fuse(chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].variant, "relu,no_bias");
}

TEST_F(KernelChoiceTest, ALaterLinearSeesTheSizesOfAFusedValue) {
  attribute("a.weight", {6, 4});
  attribute("c.weight", {5, 6});
  Node* x = b.input("x");
  Node* a = b.call("linear", "aten.linear.default", {x, b.attr("a_weight", "a.weight")});
  Node* relu = b.call("relu", "aten.relu.default", {a});
  Node* c = b.call("linear_1", "aten.linear.default", {relu, b.attr("c_weight", "c.weight")});
  b.output(Tuple{{c}});
  program.graph.set_value_info(x, "float32", {2, 3, 4});
  program.graph.set_value_info(relu, "float32", {2, 3, 6});
  FixedChooser chooser(std::vector<std::string>{"onednn_fused", "onednn"});
  fuse(chooser);
  ASSERT_EQ(chooser.queries.size(), 2u);
  EXPECT_EQ(chooser.queries[1].shape, (std::vector<int64_t>{6, 6, 5}));
}

TEST_F(KernelChoiceTest, Float32KeepsAnInt8CandidateUnquantized) {
  build_linear_gelu();
  auto graph_before = structure();
  FixedChooser chooser("float32");
  PassResult result = run_pass(QuantizeLinearsInt8({}), program, edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].op, "int8_linear");
  EXPECT_EQ(chooser.queries[0].variant, "gelu");  // the per-token kernel would apply it
  EXPECT_EQ(chooser.queries[0].candidates,
            (std::vector<std::string>{"float32", "int8_per_token", "int8_onednn", "int8_fbgemm"}));
  EXPECT_TRUE(result.changed.empty());
  EXPECT_EQ(structure(), graph_before);
}

// A Linear with outlier channels is offered the per-token kernel (the only one that sets them
// aside) and the float Linear, not the packed kernels' one scale per tensor.
TEST_F(KernelChoiceTest, OutlierChannelsOfferThePerTokenKernelOnly) {
  build_linear_gelu();
  FixedChooser chooser("int8_per_token");
  PassResult result =
      run_pass(QuantizeLinearsInt8({}, "float32", {}, false, {{"linear", {0, 1, 3}}}), program,
               edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].candidates, (std::vector<std::string>{"float32", "int8_per_token"}));
  // Timed with them, their count rounded up to a power of two.
  EXPECT_EQ(chooser.queries[0].variant, "gelu,outliers=4");
  EXPECT_EQ(result.changed.size(), 1u);
}

// Where the per-token kernel is not the only one offered, a packed kernel takes the outlier
// channels: its call names them and reads their float weight, its int8 weight has zeros there.
TEST_F(KernelChoiceTest, APackedKernelTakesTheOutlierChannelsToo) {
  build_linear_gelu(8);
  TensorInfo x = input({2, 3, 8});
  auto before = run({{"x", x}});
  FixedChooser chooser("int8_onednn");
  PassResult result =
      run_pass(QuantizeLinearsInt8({}, "float32", {}, false, {{"linear", {1, 6}}}, false), program,
               edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].candidates.size(), 4u);
  ASSERT_EQ(result.changed.size(), 1u);
  const char* const packed = "fxopt.runtime.dynamic_int8.dynamic_int8_linear";
  ASSERT_EQ(count(packed), 1u);
  for (const Node* node : program.graph)
    if (node->target().str() == packed) {
      ASSERT_EQ(node->args().size(), 7u);
      EXPECT_EQ(node->args()[4].as<std::string>(), "onednn");
      EXPECT_EQ(*node->args()[5].sequence(), (std::vector<Arg>{int64_t{1}, int64_t{6}}));
      const std::vector<double> values =
          ops.values(program.attributes.at(node->args()[1].as<Node*>()->target().str()));
      for (int64_t row = 0; row < 6; ++row) {  // [N, K]: columns 1 and 6 of each row
        EXPECT_EQ(values[row * 8 + 1], 0.0);
        EXPECT_EQ(values[row * 8 + 6], 0.0);
      }
    }
  double peak = 0;
  for (double v : ops.values(before[0])) peak = std::max(peak, std::abs(v));
  double error = max_diff(before, run({{"x", x}}));
  EXPECT_GT(error, 0.0);  // it did quantize
  EXPECT_LT(error, 0.05 * peak);
}

// Every int8 kernel takes x of any rank and the bias as they are: one call, no chain around it.
// The packed engines' call names its engine; the per-token one reads the weight as [K, N] and
// takes in the GELU after it.
void expect_one_call_that_reverses(KernelChoiceTest& t, const std::string& kernel) {
  t.build_linear_gelu();
  auto graph_before = t.structure();
  auto before = t.run({{"x", t.x_}});
  FixedChooser chooser(kernel);
  QuantizeLinearsInt8 pass({});
  PassResult result = run_pass(pass, t.program, t.edits, t.ops, kSig, false, chooser);
  ASSERT_EQ(result.changed.size(), 1u);
  bool per_token = kernel == "int8_per_token";
  const std::string target = per_token ? "fxopt.runtime.per_token_int8.per_token_int8_linear"
                                       : "fxopt.runtime.dynamic_int8.dynamic_int8_linear";
  const Node* call = nullptr;
  for (const Node* node : t.program.graph)
    if (node->target().str() == target) call = node;
  ASSERT_NE(call, nullptr);
  // The engine's name; the per-token kernel applies the GELU that reads the Linear.
  EXPECT_EQ(call->args().back().as<std::string>(),
            per_token ? "gelu" : kernel.substr(std::string("int8_").size()));
  EXPECT_EQ(t.count("aten.gelu.default"), per_token ? 0u : 1u);
  EXPECT_EQ(
      t.count("aten.linear.default") + t.count("aten.reshape.default") + t.count("aten.add.Tensor"),
      0u);
  EXPECT_EQ(t.program.attributes.at("fc.weight_int8").shape,
            per_token ? (std::vector<int64_t>{4, 6}) : (std::vector<int64_t>{6, 4}));
  auto after = t.run({{"x", t.x_}});
  ASSERT_EQ(after[0].shape, before[0].shape);
  double error = t.max_diff(before, after);
  EXPECT_GT(error, 0.0);  // it did quantize
  EXPECT_LT(error, 0.05);

  run_pass(pass, t.program, t.edits, t.ops, kSig, /*reverse=*/true, chooser);
  EXPECT_EQ(t.structure(), graph_before);
  EXPECT_FALSE(t.program.attributes.contains("fc.weight_int8"));
  EXPECT_EQ(t.max_diff(before, t.run({{"x", t.x_}})), 0.0);
}

// Against a Linear a lowering will run in bfloat16, the query says so: the int8 kernels are
// timed on bfloat16 activations.
TEST_F(KernelChoiceTest, ComparedWithBfloat16TheQueryCarriesItsDtype) {
  build_linear_gelu();
  auto graph_before = structure();
  FixedChooser chooser("bfloat16");
  PassResult result =
      run_pass(QuantizeLinearsInt8({}, "bfloat16"), program, edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].dtype, "bfloat16");
  EXPECT_EQ(chooser.queries[0].candidates,
            (std::vector<std::string>{"bfloat16", "int8_per_token", "int8_onednn", "int8_fbgemm"}));
  EXPECT_TRUE(result.changed.empty());
  EXPECT_EQ(structure(), graph_before);
  EXPECT_THROW(QuantizeLinearsInt8({}, "float16"), std::invalid_argument);
}

TEST_F(KernelChoiceTest, PerTokenInt8IsOneCallThatReversesExactly) {
  expect_one_call_that_reverses(*this, "int8_per_token");
}

TEST_F(KernelChoiceTest, OneDnnInt8IsOnePackedCallThatReversesExactly) {
  expect_one_call_that_reverses(*this, "int8_onednn");
}

TEST_F(KernelChoiceTest, FbgemmInt8IsOnePackedCallThatReversesExactly) {
  expect_one_call_that_reverses(*this, "int8_fbgemm");
}

// Without VNNI the packed engines' 16-bit pair sums saturate past 63 weight levels: each engine's
// weights get at most the levels its option allows, the per-token kernel's all 127.
TEST_F(KernelChoiceTest, PackedWeightsKeepTheLevelsTheirEngineAllows) {
  build_linear_gelu(8);
  for (const auto& [kernel, levels] : {std::pair{"int8_fbgemm", 63},
                                       {"int8_onednn", 127},
                                       {"int8_fbgemm", 127},
                                       {"int8_onednn", 63}}) {
    SCOPED_TRACE(std::string(kernel) + " " + std::to_string(levels));
    FixedChooser chooser(kernel);
    bool fbgemm = std::string_view(kernel) == "int8_fbgemm";
    QuantizeLinearsInt8 pass({}, "float32",
                             {.onednn = fbgemm ? 127 : levels, .fbgemm = fbgemm ? levels : 127});
    ASSERT_EQ(run_pass(pass, program, edits, ops, kSig, false, chooser).changed.size(), 1u);
    // The stored values and scales, as the kernel's call reads them (reversal keeps the
    // paths of the first round taken, so the second stores under new ones).
    const Node* call = nullptr;
    for (const Node* node : program.graph)
      if (node->target().str() == "fxopt.runtime.dynamic_int8.dynamic_int8_linear") call = node;
    ASSERT_NE(call, nullptr);
    auto stored = [&](size_t i) -> const std::vector<double>& {
      return ops.values(program.attributes.at(call->args()[i].as<Node*>()->target().str()));
    };
    const std::vector<double>& weight = ops.values(program.attributes.at("fc.weight"));
    const std::vector<double>& values = stored(1);
    const std::vector<double>& scales = stored(2);
    for (size_t row = 0; row < scales.size(); ++row) {
      double peak = 0, level = 0;
      for (size_t col = 0; col < 8; ++col) {
        peak = std::max(peak, std::abs(weight[row * 8 + col]));
        level = std::max(level, std::abs(values[row * 8 + col]));
      }
      EXPECT_EQ(level, levels);  // the largest weight of a row takes the top level
      EXPECT_NEAR(scales[row], peak / levels, 1e-12);
    }
    run_pass(pass, program, edits, ops, kSig, /*reverse=*/true, chooser);
  }
  EXPECT_THROW(QuantizeLinearsInt8({}, "float32", {.fbgemm = 0}), std::invalid_argument);
  EXPECT_THROW(QuantizeLinearsInt8({}, "float32", {.onednn = 128}), std::invalid_argument);
  for (const char* option : {"fbgemm_weight_max", "onednn_weight_max"}) {
    EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{option, std::string("63")}}}),
                 std::invalid_argument);
    EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{option, 300}}}), std::invalid_argument);
  }
}

TEST_F(KernelChoiceTest, AWeightOnlyQueryCarriesTheActivationDtype) {
  build_linear_gelu(16);  // a multiple of 16: what the bfloat16 kernel takes
  auto graph_before = structure();
  FixedChooser chooser("float32");
  PassResult result = run_pass(QuantizeLinearsWeightOnly("bfloat16", Opaque{5}, Opaque{6}, 8, 32),
                               program, edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].op, "int8_weight_only");
  EXPECT_EQ(chooser.queries[0].dtype, "bfloat16");
  EXPECT_EQ(chooser.queries[0].shape, (std::vector<int64_t>{6, 16, 6}));
  EXPECT_TRUE(result.changed.empty());
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(KernelChoiceTest, AnAnswerOutOfRangeFailsNamingTheNode) {
  build_linear_gelu();
  FixedChooser chooser("no such kernel");
  try {
    fuse(chooser);
    FAIL() << "expected a PassError";
  } catch (const PassError& e) {
    EXPECT_NE(std::string(e.what()).find("linear"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("picked candidate 3 of 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace fxopt
