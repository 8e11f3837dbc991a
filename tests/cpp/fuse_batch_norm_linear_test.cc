#include <gtest/gtest.h>

#include <algorithm>

#include "norm_fixtures.h"
#include "passes/fuse_batch_norm_in_linear.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseBatchNorm1dInLinear-test";

class FuseBatchNormInLinearTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(pass_, program, edits, ops, kSig, reverse);
  }
  // Forward folds (outputs within 1e-9, `nodes_after` nodes left), reverse restores exactly.
  void check_round_trip(const std::string& changed, size_t nodes_after, bool sort = false) {
    auto canonical = [&] {
      std::vector<std::string> s = structure();
      if (sort) std::sort(s.begin(), s.end());
      return s;
    };
    auto before = run({{"x", x_}});
    auto graph_before = canonical();

    PassResult forward = apply();
    EXPECT_EQ(forward.changed, std::vector<std::string>{changed});
    EXPECT_TRUE(forward.skipped.empty()) << forward.skipped[0].reason;
    EXPECT_EQ(program.graph.size(), nodes_after);
    EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-9);
    EXPECT_TRUE(program.graph.lint().empty());

    PassResult backward = apply(/*reverse=*/true);
    EXPECT_EQ(backward.changed, std::vector<std::string>{changed});
    EXPECT_EQ(canonical(), graph_before);
    EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  }

  FuseBatchNorm1dInLinear pass_;
  TensorInfo x_ = input({3, 4});
};

TEST_F(FuseBatchNormInLinearTest, LinearThenBatchNormModules) {
  linear_module("fc", 4, 5, true);
  bn_module("bn", 1, 5);
  Node* x = b.input("x");
  Node* fc = b.module("fc", "fc", {x});
  Node* bn = b.module("bn", "bn", {fc});
  b.output(bn);
  program.graph.set_rank(fc, 2);
  check_round_trip("fc", 3);
}

TEST_F(FuseBatchNormInLinearTest, BatchNormThenLinearWithoutBiasOrAffine) {
  linear_module("fc", 4, 5, false);
  bn_module("bn", 1, 4, /*affine=*/false);
  Node* x = b.input("x");
  Node* bn = b.module("bn", "bn", {x});
  Node* fc = b.module("fc", "fc", {bn});
  b.output(fc);
  program.graph.set_rank(x, 2);
  check_round_trip("fc", 3);
}

TEST_F(FuseBatchNormInLinearTest, AtenBothOrders) {
  attribute("fc1.weight", {5, 4});
  attribute("fc1.bias", {5});
  attribute("fc2.weight", {3, 5});
  Node* x = b.input("x");
  auto first = bn_attributes("bn1", 4);
  Node* bn1 = b.call("batch_norm", "aten.batch_norm.default",
                     {x, first.weight, first.bias, first.mean, first.var, false, 0.1, 1e-5, false});
  Node* fc1 = b.call("linear", "aten.linear.default",
                     {bn1, b.attr("fc1_weight", "fc1.weight"), b.attr("fc1_bias", "fc1.bias")});
  Node* act = b.call("add", "aten.add.Tensor", {fc1, fc1});
  Node* fc2 = b.call("linear_1", "aten.linear.default", {act, b.attr("fc2_weight", "fc2.weight")});
  auto second = bn_attributes("bn2", 3);
  Node* bn2 =
      b.call("batch_norm_1", "aten.batch_norm.default",
             {fc2, second.weight, second.bias, second.mean, second.var, false, 0.1, 1e-5, false});
  b.output(Tuple{{bn2}});
  for (Node* n : {x, bn1, fc1, act, fc2, bn2}) program.graph.set_rank(n, 2);
  auto before = run({{"x", x_}});

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"linear", "linear_1"}));
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.batch_norm.default"), 0u);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-9);
  // linear_1 had no bias: the fold gave it one next to its weight.
  EXPECT_EQ(fc2->args().size(), 3u);
  EXPECT_EQ(fc2->args()[2].node()->target().str(), "fc2.bias_fused");

  apply(/*reverse=*/true);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.batch_norm.default"), 2u);
  EXPECT_EQ(fc2->args().size(), 2u);  // the bias operand is left out again, as it was
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(FuseBatchNormInLinearTest, RefusesAmbiguousOrUnsafeFolds) {
  linear_module("fc", 4, 4, true);
  bn_module("bn", 1, 4);
  bn_module("train", 1, 4, true, /*training=*/true);
  Node* x = b.input("x");
  Node* unknown = b.module("unknown", "bn", {b.module("fc", "fc", {x})});
  Node* fc1 = b.module("fc_1", "fc", {x});
  Node* three_d = b.module("three_d", "bn", {fc1});
  Node* fc2 = b.module("fc_2", "fc", {x});
  Node* shared = b.module("shared", "bn", {fc2});
  Node* train = b.module("train", "train", {b.module("fc_3", "fc", {x})});
  Node* alone = b.module("alone", "bn", {x});
  b.output(Tuple{{unknown, three_d, shared, fc2, train, alone}});
  program.graph.set_rank(fc1, 3);
  program.graph.set_rank(fc2, 2);
  program.graph.set_rank(x, 2);

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  std::vector<std::string> reasons;
  for (const Skip& s : result.skipped) reasons.push_back(s.node + ": " + s.reason);
  ASSERT_EQ(reasons.size(), 5u) << ::testing::PrintToString(reasons);
  EXPECT_NE(reasons[0].find("unknown: the rank of its input is unknown"), std::string::npos);
  EXPECT_NE(reasons[1].find("three_d: its input is 3-D"), std::string::npos);
  EXPECT_NE(reasons[2].find("shared: the Linear's output has other users"), std::string::npos);
  EXPECT_NE(reasons[3].find("train: is in training mode"), std::string::npos);
  EXPECT_NE(reasons[4].find("alone: neither reads a Linear's output"), std::string::npos);
  EXPECT_TRUE(edits.empty());
}

}  // namespace
}  // namespace fxopt
