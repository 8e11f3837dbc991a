#include <gtest/gtest.h>

#include <algorithm>

#include "linear_fixtures.h"
#include "passes/fuse_bias_in_linear.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseBiasInLinear-test";

class FuseBiasTest : public ::testing::Test, protected testing::LinearFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(pass_, program, edits, ops, kSig, reverse);
  }

  FuseBiasInLinear pass_;
  TensorInfo x_ = input({2, 3, 4});
};

TEST_F(FuseBiasTest, ModuleLinearsShareOneOnesColumnAndReverseExactly) {
  linear_module("a", 4, 5, true);
  linear_module("one", 4, 1, true);  // out_features == 1
  linear_module("plain", 4, 2, false);
  ModuleInfo a_before = program.modules.at("a");
  Node* x = b.input("x");
  Node* a = b.module("a", "a", {x});
  Node* one = b.module("one", "one", {x});
  Node* plain = b.module("plain", "plain", {x});
  b.output(Tuple{{a, one, plain}});
  auto before = run({{"x", x_}});

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"pad", "a", "one"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].node, "plain");
  EXPECT_EQ(forward.skipped[0].reason, "has no bias");
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.nn.functional.pad"), 1u);
  Node* pad = program.graph.find_by_name("pad");
  EXPECT_EQ(a->args(), Args{pad});
  EXPECT_EQ(one->args(), Args{pad});
  EXPECT_EQ(plain->args(), Args{x});
  const ModuleInfo& fused = program.modules.at("a");
  EXPECT_EQ(*fused.attribute("in_features"), Arg(5));
  EXPECT_EQ(fused.tensor("weight")->shape, (std::vector<int64_t>{5, 5}));
  EXPECT_FALSE(fused.tensor("bias")->present());
  EXPECT_EQ(program.modules.at("one").tensor("weight")->shape, (std::vector<int64_t>{1, 5}));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(program.graph.size(), 5u);
  EXPECT_EQ(a->args(), Args{x});
  const ModuleInfo& a_after = program.modules.at("a");
  EXPECT_EQ(a_after.attributes, a_before.attributes);
  EXPECT_EQ(ops.values(*a_after.tensor("weight")), ops.values(*a_before.tensor("weight")));
  EXPECT_EQ(ops.values(*a_after.tensor("bias")), ops.values(*a_before.tensor("bias")));
  EXPECT_TRUE(a_after.tensor("bias")->is_parameter);
  EXPECT_EQ(program.modules.at("one").tensor("bias")->shape, (std::vector<int64_t>{1}));
  for (Node* n : program.graph) EXPECT_TRUE(n->meta().items.empty()) << n->name();
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(FuseBiasTest, AtenLinearDropsItsBiasOperandAndGetsItBack) {
  attribute("fc.weight", {3, 4});
  attribute("fc.bias", {3});
  attribute("fc2.weight", {2, 4});
  attribute("fc2.bias", {2});
  Node* x = b.input("x");
  Node* w = b.attr("fc_weight", "fc.weight");
  Node* bias = b.attr("fc_bias", "fc.bias");
  Node* w2 = b.attr("fc2_weight", "fc2.weight");
  Node* bias2 = b.attr("fc2_bias", "fc2.bias");
  Node* fc = b.call("linear", "aten.linear.default", {x, w, bias});
  Node* fc2 = b.call("linear_1", "aten.linear.default", {x, w2, bias2});
  b.output(Tuple{{fc, fc2}});
  auto before = run({{"x", x_}});

  apply();
  Node* pad = program.graph.find_by_name("constant_pad_nd");
  ASSERT_NE(pad, nullptr);
  EXPECT_EQ(pad->args(), (Args{x, List{{0, 1}}, 1.0}));
  EXPECT_EQ(fc->args(), (Args{pad, w}));
  EXPECT_EQ(fc2->args(), (Args{pad, w2}));
  EXPECT_FALSE(program.attributes.contains("fc.bias"));
  EXPECT_EQ(program.attributes.at("fc.weight").shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(program.graph.size(), 7u);  // 8 - two bias get_attr + one pad
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(program.graph.size(), 8u);
  EXPECT_EQ(fc->args().size(), 3u);
  EXPECT_EQ(fc->args()[0].node(), x);
  EXPECT_EQ(fc->args()[1].node(), w);  // the same get_attr node, its attribute restored
  EXPECT_EQ(fc->args()[2].node()->name(), "fc_bias");
  EXPECT_EQ(program.attributes.at("fc.weight").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(
      program.graph.find(NodeKind::CallFunction, Symbol::intern("aten.constant_pad_nd.default"))
          .size(),
      0u);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

// torch.export hoists get_attr reads above everything. Reverse recreates the erased bias reads
// right before their Linears; the driver puts them back where they stood, with the marks and
// records another transformation had left on them (rewrite/placement.h).
TEST_F(FuseBiasTest, ErasedReadsComeBackInPlaceWithOtherTransformationsRecords) {
  attribute("fc.weight", {3, 4});
  attribute("fc.bias", {3});
  attribute("fc2.weight", {2, 4});
  attribute("fc2.bias", {2});
  Node* w = b.attr("fc_weight", "fc.weight");
  Node* bias = b.attr("fc_bias", "fc.bias");
  Node* w2 = b.attr("fc2_weight", "fc2.weight");
  Node* bias2 = b.attr("fc2_bias", "fc2.bias");
  Node* x = b.input("x");
  Node* fc = b.call("linear", "aten.linear.default", {x, w, bias});
  Node* fc2 = b.call("linear_1", "aten.linear.default", {x, w2, bias2});
  b.output(Tuple{{fc, fc2}});
  Rewriter other(program, edits);
  set_reversal_record(other, bias, "Other", Record().set("lowered", std::string("fc.bias")));
  mark(other, bias, "Other");
  Dict bias_meta = bias->meta();
  auto order = [&] {
    std::vector<std::string> names;
    for (Node* n : program.graph) names.push_back(n->name());
    return names;
  };
  std::vector<std::string> order_before = order();
  auto before = run({{"x", x_}});

  apply();
  EXPECT_TRUE(bias->erased());
  EXPECT_EQ(program.graph.size(), 7u);  // two bias reads fewer, one ones column more
  edits.clear();

  apply(/*reverse=*/true);
  EXPECT_EQ(order(), order_before);
  Node* restored = program.graph.find_by_name("fc_bias");
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(restored->meta(), bias_meta);
  EXPECT_TRUE(is_marked(*restored, "Other"));
  EXPECT_FALSE(program.graph.find_by_name("output")->meta().find(kReversalKey));
  EXPECT_TRUE(std::any_of(edits.begin(), edits.end(),
                          [](const Edit& e) { return e.kind == Edit::Kind::MoveNode; }));
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(FuseBiasTest, FunctionalLinearWithKeywordBias) {
  attribute("w", {3, 4});
  attribute("b", {3});
  Node* x = b.input("x");
  Node* w = b.attr("w", "w");
  Node* bias = b.attr("b", "b");
  Node* fc = b.call("linear", "torch._C._nn.linear", {x, w}, Dict{{{"bias", bias}}});
  b.output(fc);
  auto before = run({{"x", x_}});

  apply();
  EXPECT_TRUE(fc->kwargs().items.empty());
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.nn.functional.pad"), 1u);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  ASSERT_NE(fc->kwargs().find("bias"), nullptr);
  EXPECT_EQ(fc->kwargs().find("bias")->node()->name(), "b");
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(FuseBiasTest, LeavesSharedAndMixedTensorsAlone) {
  linear_module("shared", 4, 2, true);
  linear_module("frozen_bias", 4, 2, true);
  program.modules.at("frozen_bias").tensors["bias"].requires_grad = false;
  Node* x = b.input("x");
  Node* s1 = b.module("shared", "shared", {x});
  Node* s2 = b.module("shared_1", "shared", {s1});
  Node* f = b.module("frozen_bias", "frozen_bias", {x});
  b.output(Tuple{{s2, f}});

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 3u);
  EXPECT_NE(result.skipped[0].reason.find("called at 2 places"), std::string::npos);
  EXPECT_NE(result.skipped[2].reason.find("requires_grad"), std::string::npos);
  EXPECT_TRUE(edits.empty());
}

}  // namespace
}  // namespace fxopt
