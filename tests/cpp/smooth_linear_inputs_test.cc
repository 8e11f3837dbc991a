#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/smooth_linear_inputs.h"

namespace fxopt {
namespace {

const std::string kSig = "SmoothLinearInputs-test";

class SmoothLinearInputsTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(std::map<std::string, std::vector<double>> factors, bool reverse = false) {
    return run_pass(SmoothLinearInputs(std::move(factors)), program, edits, ops, kSig, reverse);
  }
};

TEST_F(SmoothLinearInputsTest, ModuleLinearReadsItsInputDividedAndReversesExactly) {
  linear_module("fc", 3, 2, true);
  ModuleInfo fc_before = program.modules.at("fc");
  TensorInfo x_value = input({4, 3});
  Node* x = b.input("x");
  Node* fc = b.module("fc", "fc", {x});
  b.output(Tuple{{fc}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PassResult forward = apply({{"fc", {2.0, 0.5, 4.0}}});
  ASSERT_EQ(forward.changed, std::vector<std::string>{"fc"});
  Node* divided = fc->args()[0].node();
  ASSERT_TRUE(divided->is(NodeKind::CallFunction, Symbol::intern("aten.mul.Tensor")));
  EXPECT_EQ(divided->args()[0], Arg(x));
  EXPECT_EQ(ops.values(program.attributes.at("fc.weight_smooth_inverse")),
            (std::vector<double>{0.5, 2.0, 0.25}));
  // The weight's columns are multiplied by the factors, in a copy of the module.
  const std::vector<double>& w = ops.values(*fc_before.tensor("weight"));
  const std::vector<double>& smoothed =
      ops.values(*program.modules.at(fc->target().str()).tensor("weight"));
  EXPECT_EQ(smoothed[0], w[0] * 2.0);
  EXPECT_EQ(smoothed[1], w[1] * 0.5);
  EXPECT_EQ(smoothed[5], w[5] * 4.0);
  EXPECT_EQ(program.modules.at("fc").tensors, fc_before.tensors);  // copy-on-write
  EXPECT_LT(max_diff(before, run({{"x", x_value}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply({}, /*reverse=*/true);
  EXPECT_EQ(backward.changed, std::vector<std::string>{"fc"});
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("fc.weight_smooth_inverse"));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(SmoothLinearInputsTest, AtenLinearGetsASmoothedWeightAttribute) {
  attribute("w", {2, 3});
  TensorInfo x_value = input({4, 3});
  Node* x = b.input("x");
  Node* w = b.attr("w", "w");
  b.output(Tuple{{b.call("linear", "aten.linear.default", {x, w})}});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  ASSERT_EQ(apply({{"linear", {1.0, 3.0, 0.25}}}).changed.size(), 1u);
  EXPECT_EQ(count(NodeKind::GetAttr, "w"), 0u);
  EXPECT_LT(max_diff(before, run({{"x", x_value}})), 1e-12);

  apply({}, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(SmoothLinearInputsTest, SkipsFactorsThatDoNotFitAndLinearsWithoutThem) {
  linear_module("short", 3, 2, true);
  linear_module("zero", 3, 2, true);
  linear_module("none", 3, 2, true);
  linear_module("half", 3, 2, true, "float16");
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {4, 3});
  b.output(Tuple{{b.module("short", "short", {x}), b.module("zero", "zero", {x}),
                  b.module("none", "none", {x}), b.module("half", "half", {x})}});
  auto graph_before = structure();

  PassResult result =
      apply({{"short", {1.0, 2.0}}, {"zero", {1.0, 0.0, 2.0}}, {"half", {1.0, 1.0, 1.0}}});
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 3u);  // "none" has no factors: not a candidate at all
  EXPECT_EQ(result.skipped[0].reason, "2 factors for 3 input channels");
  EXPECT_EQ(result.skipped[1].reason, "its factors are not all positive and finite");
  EXPECT_EQ(result.skipped[2].reason, "its weight is float16, not float32");
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(SmoothLinearInputsTest, OptionsAreChecked) {
  EXPECT_THROW(SmoothLinearInputs::from_options(Dict{}), std::invalid_argument);
  EXPECT_THROW(SmoothLinearInputs::from_options(Dict{{{"factors", Dict{{{"fc", 3}}}}}}),
               std::invalid_argument);
  EXPECT_THROW(SmoothLinearInputs::from_options(Dict{{{"factors", Dict{{{"fc", List{{"a"}}}}}}}}),
               std::invalid_argument);
  EXPECT_NE(SmoothLinearInputs::from_options(
                Dict{{{"factors", Dict{{{"fc", List{{1.0, int64_t{2}}}}}}}}}),
            nullptr);
}

}  // namespace
}  // namespace fxopt
