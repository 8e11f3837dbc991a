#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/quantize_linears_int8.h"

namespace fxopt {
namespace {

const std::string kSig = "QuantizeLinearsInt8-test";
const char* const kPerTokenCall = "fxopt.runtime.per_token_int8.per_token_int8_linear";

class QuantizeLinearsInt8Test : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false, std::vector<std::string> keep = {}) {
    return run_pass(QuantizeLinearsInt8(std::move(keep)), program, edits, ops, kSig, reverse);
  }
  // The largest |a - b| over the largest |a|: int8 error is relative to the output's scale.
  double relative_error(const std::vector<TensorInfo>& a, const std::vector<TensorInfo>& b) {
    double peak = 0;
    for (const TensorInfo& t : a)
      for (double v : ops.values(t)) peak = std::max(peak, std::abs(v));
    return max_diff(a, b) / peak;
  }
};

TEST_F(QuantizeLinearsInt8Test, ModuleLinearOn3dInputBecomesAnInt8ProductAndReversesExactly) {
  linear_module("fc", 16, 8, true);
  TensorInfo x_value = input({2, 3, 16});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 16});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PassResult forward = apply();
  ASSERT_EQ(forward.changed.size(), 1u);
  EXPECT_TRUE(forward.skipped.empty());
  EXPECT_EQ(count(NodeKind::CallModule, "fc"), 0u);
  // One call, which takes x's leading sizes and the bias as they are: no chain around it.
  EXPECT_EQ(count(NodeKind::CallFunction, kPerTokenCall), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.reshape.default"), 0u);
  // The weight is stored once, transposed, as int8 next to the original, which stays.
  const TensorInfo& packed = program.attributes.at("fc.weight_int8");
  EXPECT_EQ(packed.dtype, "int8");
  EXPECT_EQ(packed.shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(program.attributes.at("fc.weight_int8_scale").shape, std::vector<int64_t>{8});
  EXPECT_TRUE(program.modules.contains("fc"));
  auto after = run({{"x", x_value}});
  ASSERT_EQ(after[0].shape, before[0].shape);
  double error = relative_error(before, after);
  EXPECT_GT(error, 0.0);  // it did quantize
  EXPECT_LT(error, 0.02);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"fc"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("fc.weight_int8"));
  EXPECT_FALSE(program.attributes.contains("fc.weight_int8_scale"));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(QuantizeLinearsInt8Test, AtenLinearWithoutBiasPassesNoBias) {
  attribute("w", {4, 8});
  TensorInfo x_value = input({5, 8});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {5, 8});
  Node* w = b.attr("w", "w");
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, w})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  ASSERT_EQ(apply().changed.size(), 1u);
  ASSERT_EQ(count(NodeKind::CallFunction, kPerTokenCall), 1u);
  for (const Node* node : program.graph)
    if (node->target().str() == kPerTokenCall) EXPECT_TRUE(node->args().at(3).is_none());
  EXPECT_EQ(count(NodeKind::GetAttr, "w"), 0u);  // the float weight is no longer read
  EXPECT_LT(relative_error(before, run({{"x", x_value}})), 0.02);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

// The int8 calls take x as it comes: an input whose rank nothing recorded is quantized too (its
// kernel the static choice, with no sizes to time).
TEST_F(QuantizeLinearsInt8Test, SkipsKeptAndHalfPrecisionLinearsNotUnknownRanks) {
  linear_module("kept", 4, 4, true);
  linear_module("half", 4, 4, true, "float16");
  linear_module("unknown", 4, 4, true);
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 4});
  Node* y = b.input("y");  // no recorded facts
  b.output(Tuple{{b.module("kept", "kept", {x}), b.module("half", "half", {x}),
                  b.module("unknown", "unknown", {y})}});
  TensorInfo x_value = input({2, 4}), y_value = input({3, 2, 4});
  auto before = run({{"x", x_value}, {"y", y_value}});
  auto graph_before = structure();

  PassResult result = apply(false, {"kept"});
  EXPECT_EQ(result.changed.size(), 1u);
  ASSERT_EQ(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason, "kept in float32 (option 'keep')");
  EXPECT_EQ(result.skipped[1].reason, "its weight is float16, not float32");
  auto after = run({{"x", x_value}, {"y", y_value}});
  EXPECT_EQ(after[2].shape, (std::vector<int64_t>{3, 2, 4}));
  EXPECT_LT(relative_error(before, after), 0.02);

  apply(/*reverse=*/true, {"kept"});
  EXPECT_EQ(structure(), graph_before);
}

// Calibration's probe: the kernel each Linear gets, with nothing quantized or changed.
TEST_F(QuantizeLinearsInt8Test, ChooseOnlyRecordsTheChoiceAndChangesNothing) {
  linear_module("fc", 16, 8, true);
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 16});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto graph_before = structure();
  auto attributes_before = program.attributes;

  PassResult probe = run_pass(QuantizeLinearsInt8({}, "float32", {}, /*choose_only=*/true), program,
                              edits, ops, kSig, /*reverse=*/false);
  EXPECT_TRUE(probe.changed.empty());
  ASSERT_EQ(probe.skipped.size(), 1u);
  EXPECT_EQ(probe.skipped[0].reason, "option 'choose_only': its kernel is in the choices");
  ASSERT_EQ(probe.choices.size(), 1u);
  EXPECT_EQ(probe.choices[0].node, "fc");
  EXPECT_EQ(probe.choices[0].picked, "int8_per_token");  // the static fallback here
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(program.attributes, attributes_before);  // no int8 weight stored
}

// Outlier channels (option "outliers"): the call names them and reads their float weight
// columns, stored transposed; the int8 weight has zeros for them, so its scales fit the others;
// the outputs are closer to the float Linear's than without; reverse removes all three tensors.
TEST_F(QuantizeLinearsInt8Test, OutlierChannelsStayOutOfTheInt8Product) {
  linear_module("fc", 16, 8, true);
  std::vector<double> xs = ops.values(input({2, 3, 16}));
  for (size_t i = 0; i < xs.size(); ++i)
    if (i % 16 == 2 || i % 16 == 9) xs[i] *= 80.0;  // two outlier channels
  TensorInfo x_value = ops.make({2, 3, 16}, xs, "float32");
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3, 16});
  b.output(Tuple{{b.module("fc", "fc", {x})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();
  const std::vector<double> weight = ops.values(*program.modules.at("fc").tensor("weight"));

  PassResult plain = apply();
  double plain_error = relative_error(before, run({{"x", x_value}}));
  apply(/*reverse=*/true);
  std::map<std::string, std::vector<int64_t>> outliers = {{"fc", {2, 9}}};
  PassResult forward = run_pass(QuantizeLinearsInt8({}, "float32", {}, false, outliers), program,
                                edits, ops, kSig, /*reverse=*/false);
  ASSERT_EQ(forward.changed.size(), 1u);
  std::string values_path, outliers_path;  // the plain run's paths stay taken
  for (const Node* node : program.graph)
    if (node->target().str() == kPerTokenCall) {
      ASSERT_EQ(node->args().size(), 7u);
      EXPECT_EQ(node->args()[4].as<std::string>(), "none");
      EXPECT_EQ(*node->args()[5].sequence(), (std::vector<Arg>{int64_t{2}, int64_t{9}}));
      values_path = node->args()[1].as<Node*>()->target().str();
      outliers_path = node->args()[6].as<Node*>()->target().str();
    }
  EXPECT_EQ(outliers_path, "fc.weight_int8_outliers");
  const TensorInfo& stored = program.attributes.at(outliers_path);
  EXPECT_EQ(stored.shape, (std::vector<int64_t>{2, 8}));
  const std::vector<double> columns = ops.values(stored);
  const std::vector<double> values = ops.values(program.attributes.at(values_path));
  for (int64_t j = 0; j < 8; ++j) {
    EXPECT_EQ(columns[j], weight[j * 16 + 2]);
    EXPECT_EQ(columns[8 + j], weight[j * 16 + 9]);
    EXPECT_EQ(values[2 * 8 + j], 0.0);  // values are [K, N]
    EXPECT_EQ(values[9 * 8 + j], 0.0);
  }
  double error = relative_error(before, run({{"x", x_value}}));
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, plain_error / 4);

  PassResult backward = run_pass(QuantizeLinearsInt8({}, "float32", {}, false, outliers), program,
                                 edits, ops, kSig, /*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"fc"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains(outliers_path));
  EXPECT_FALSE(program.attributes.contains(values_path));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
  EXPECT_EQ(plain.changed.size(), 1u);

  // A channel the Linear does not have skips it, naming the channel.
  PassResult unfit = run_pass(QuantizeLinearsInt8({}, "float32", {}, false, {{"fc", {16}}}),
                              program, edits, ops, kSig, /*reverse=*/false);
  EXPECT_TRUE(unfit.changed.empty());
  ASSERT_EQ(unfit.skipped.size(), 1u);
  EXPECT_EQ(unfit.skipped[0].reason,
            "outlier channel 16 is not one of its 16 input channels (option 'outliers')");
}

TEST_F(QuantizeLinearsInt8Test, OptionsAreChecked) {
  EXPECT_NE(QuantizeLinearsInt8::from_options(Dict{}), nullptr);  // every option has a default
  EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{"keep", 3}}}), std::invalid_argument);
  EXPECT_NE(QuantizeLinearsInt8::from_options(Dict{{{"keep", List{{"a"}}}}}), nullptr);
  EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{"choose_only", 1}}}),
               std::invalid_argument);
  EXPECT_NE(QuantizeLinearsInt8::from_options(Dict{{{"choose_only", true}}}), nullptr);
  EXPECT_NE(QuantizeLinearsInt8::from_options(Dict{{{"outliers", Dict{{{"fc", List{{1, 2}}}}}}}}),
            nullptr);
  EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{"outliers", List{{1}}}}}),
               std::invalid_argument);
  EXPECT_THROW(QuantizeLinearsInt8::from_options(Dict{{{"outliers", Dict{{{"fc", List{{"a"}}}}}}}}),
               std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
