#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "norm_fixtures.h"
#include "passes/fuse_batch_norm_in_conv.h"
#include "tensor/batch_norm_fold.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseBatchNormInConv-test";

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class FuseBatchNormInConvTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false, bool only_2d = false) {
    return run_pass(FuseBatchNormInConv(only_2d), program, edits, ops, kSig, reverse);
  }

  // Builds x -> conv -> bn -> output in the module dialect and checks fold and reverse.
  void check_module_fold(int dims, int64_t groups, bool transposed, bool conv_bias, bool affine) {
    conv_module("block.conv", dims, 4, 6, groups, conv_bias, transposed);
    bn_module("block.bn", dims, 6, affine);
    ModuleInfo conv_before = program.modules.at("block.conv");
    Node* x = b.input("x");
    Node* conv = b.module("block_conv", "block.conv", {x});
    Node* bn = b.module("block_bn", "block.bn", {conv});
    b.output(Tuple{{bn}});
    std::vector<int64_t> shape = {2, 4};
    shape.insert(shape.end(), dims, 5);
    TensorInfo input = this->input(shape);
    auto before = run({{"x", input}});
    auto graph_before = structure();

    PassResult forward = apply();
    EXPECT_EQ(forward.changed, std::vector<std::string>{"block_conv"});
    EXPECT_TRUE(forward.skipped.empty());
    EXPECT_EQ(program.graph.size(), 3u);
    EXPECT_EQ(conv->target().str(), "block.conv_fused");
    EXPECT_TRUE(is_marked(*conv, kSig));
    EXPECT_EQ(program.graph.last()->args()[0], Arg(Tuple{{conv}}));
    const ModuleInfo& conv_after = program.modules.at("block.conv");  // copy-on-write
    EXPECT_EQ(conv_after.tensors, conv_before.tensors);
    EXPECT_EQ(conv_after.attributes, conv_before.attributes);
    EXPECT_TRUE(program.modules.at("block.conv_fused").tensor("bias")->present());
    EXPECT_LE(max_diff(before, run({{"x", input}})), 1e-9);
    EXPECT_TRUE(program.graph.lint().empty());

    PassResult backward = apply(/*reverse=*/true);
    EXPECT_EQ(backward.changed, std::vector<std::string>{"block_conv"});
    EXPECT_EQ(structure(), graph_before);
    EXPECT_FALSE(program.modules.contains("block.conv_fused"));
    EXPECT_EQ(max_diff(before, run({{"x", input}})), 0.0);
    EXPECT_TRUE(conv->meta().items.empty());
  }
};

TEST_F(FuseBatchNormInConvTest, Conv2dModule) { check_module_fold(2, 1, false, true, true); }
TEST_F(FuseBatchNormInConvTest, Conv1dWithoutBiasAndAffine) {
  check_module_fold(1, 1, false, false, false);
}
TEST_F(FuseBatchNormInConvTest, GroupedConv3d) { check_module_fold(3, 2, false, true, true); }
TEST_F(FuseBatchNormInConvTest, ConvTranspose2d) { check_module_fold(2, 1, true, true, true); }
// Output channel o of a grouped transposed convolution is dim 1 of the weight within a group.
TEST_F(FuseBatchNormInConvTest, GroupedConvTranspose2d) {
  check_module_fold(2, 2, true, false, true);
}

// timm's BatchNormAct2d asserts on the rank of the convolution's output before normalizing it
// (issue 21): reads of the output's shape do not block the fold, keep reading the convolution,
// and read it again after reverse, in the order they had.
TEST_F(FuseBatchNormInConvTest, ReadsOfTheOutputShapeDoNotBlockTheFold) {
  conv_module("conv", 2, 4, 6, 1, true);
  bn_module("bn", 2, 6, true);
  Node* x = b.input("x");
  Node* conv = b.module("conv", "conv", {x});
  Node* ndim = b.call("getattr_1", "getattr", {conv, "ndim"});
  Node* eq = b.call("eq", "_operator.eq", {ndim, 4});
  b.call("_assert", "torch._assert", {eq, "expected 4D input"});
  Node* size = b.method("size", "size", {conv, 1});
  Node* bn = b.module("bn", "bn", {conv});
  b.output(Tuple{{bn, size}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, std::vector<std::string>{"conv"});
  EXPECT_EQ(ndim->args()[0], Arg(conv));
  EXPECT_EQ(size->args()[0], Arg(conv));
  EXPECT_EQ(program.graph.last()->args()[0], Arg(Tuple{{conv, size}}));

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(FuseBatchNormInConvTest, AtenConvAndBatchNormWithGetAttrWeights) {
  attribute("c.weight", {6, 4, 3, 3});
  Node* x = b.input("x");
  Node* w = b.attr("c_weight", "c.weight");
  auto reads = bn_attributes("bn", 6);
  Node* conv = b.call("conv2d", "aten.conv2d.default", {x, w, None{}, List{{1, 1}}, List{{1, 1}}});
  Node* bn =
      b.call("batch_norm", "aten.batch_norm.default",
             {conv, reads.weight, reads.bias, reads.mean, reads.var, false, 0.1, 1e-5, false});
  Node* relu_input = b.call("add", "aten.add.Tensor", {bn, bn});
  b.output(Tuple{{relu_input}});
  TensorInfo input = this->input({2, 4, 5, 5});
  auto before = run({{"x", input}});
  auto graph_before = sorted(structure());

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, std::vector<std::string>{"conv2d"});
  // The batch norm and its now unread statistics are gone; the conv reads two new attributes.
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.batch_norm.default"), 0u);
  EXPECT_EQ(program.graph.size(), 6u);  // x, weight, bias, conv2d, add, output
  EXPECT_EQ(conv->args()[1].node()->target().str(), "c.weight_fused");
  EXPECT_EQ(conv->args()[2].node()->target().str(), "c.bias_fused");  // next to the weight
  EXPECT_TRUE(program.attributes.contains("c.weight"));
  EXPECT_LE(max_diff(before, run({{"x", input}})), 1e-9);
  // The record names paths only: no node reference survives into it.
  EXPECT_EQ(to_string(conv->meta()).find('%'), std::string::npos);

  apply(/*reverse=*/true);
  EXPECT_EQ(sorted(structure()), graph_before);
  EXPECT_FALSE(program.attributes.contains("c.weight_fused"));
  EXPECT_EQ(max_diff(before, run({{"x", input}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(FuseBatchNormInConvTest, DecomposedAtenFormsWithGetItem) {
  attribute("c.weight", {6, 2, 3});
  attribute("c.bias", {6});
  Node* x = b.input("x");
  Node* w = b.attr("c_weight", "c.weight");
  Node* cb = b.attr("c_bias", "c.bias");
  auto reads = bn_attributes("bn", 6, /*affine=*/false);
  Node* conv = b.call("convolution", "aten.convolution.default",
                      {x, w, cb, List{{1}}, List{{1}}, List{{1}}, false, List{{0}}, 2});
  Node* bn = b.call("bn", "aten._native_batch_norm_legit_no_training.default",
                    {conv, None{}, None{}, reads.mean, reads.var, 0.1, 1e-3});
  Node* item = b.call("getitem", "_operator.getitem", {bn, 0});
  b.output(Tuple{{item}});
  TensorInfo input = this->input({2, 4, 7});
  program.graph.set_rank(x, 3);
  auto before = run({{"x", input}});
  auto graph_before = sorted(structure());

  apply();
  EXPECT_EQ(program.graph.size(), 5u);  // x, weight, bias, convolution, output
  EXPECT_EQ(program.graph.last()->args()[0], Arg(Tuple{{conv}}));
  EXPECT_LE(max_diff(before, run({{"x", input}})), 1e-9);

  apply(/*reverse=*/true);
  EXPECT_EQ(sorted(structure()), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", input}})), 0.0);
}

TEST_F(FuseBatchNormInConvTest, SkipsWhatItCannotFold) {
  conv_module("conv", 2, 4, 6, 1, true);
  conv_module("conv1d", 1, 4, 6, 1, true);
  conv_module("shared", 2, 4, 6, 1, true);
  bn_module("train", 2, 6, true, /*training=*/true);
  bn_module("nostats", 2, 6, true, false, /*track_running_stats=*/false);
  bn_module("wide", 2, 8);
  bn_module("bn1d", 1, 6);
  bn_module("bn", 2, 6);
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* c1 = b.module("c1", "conv", {x});
  Node* train = b.module("train", "train", {c1});
  Node* c2 = b.module("c2", "conv", {x});
  Node* nostats = b.module("nostats", "nostats", {c2});
  Node* c3 = b.module("c3", "conv", {x});
  Node* wide = b.module("wide", "wide", {c3});
  Node* c4 = b.module("c4", "shared", {x});
  Node* shared_bn = b.module("shared_bn", "bn", {c4});
  Node* not_conv = b.module("not_conv", "bn", {y});
  Node* c5 = b.module("c5", "conv1d", {y});
  Node* unbatched = b.module("unbatched", "bn1d", {c5});
  b.output(Tuple{{train, nostats, wide, shared_bn, c4, not_conv, unbatched}});
  program.graph.set_rank(c5, 2);

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  std::vector<std::string> reasons;
  for (const Skip& s : result.skipped) reasons.push_back(s.node + ": " + s.reason);
  ASSERT_EQ(reasons.size(), 6u) << ::testing::PrintToString(reasons);
  EXPECT_NE(reasons[0].find("train: is in training mode"), std::string::npos);
  EXPECT_NE(reasons[1].find("nostats: keeps no running statistics"), std::string::npos);
  EXPECT_NE(reasons[2].find("wide: its feature count differs"), std::string::npos);
  EXPECT_NE(reasons[3].find("shared_bn: the convolution's output has other users"),
            std::string::npos);
  EXPECT_NE(reasons[4].find("not_conv: its input is not a foldable convolution"),
            std::string::npos);
  EXPECT_NE(reasons[5].find("unbatched: does not normalize the convolution's channel axis"),
            std::string::npos);
  EXPECT_TRUE(edits.empty());
}

// Optimum's FuseBatchNorm2dInConv2d: BatchNorm1d modules are no candidates; ATen batch norms
// are, and one after a Conv1d is skipped.
TEST_F(FuseBatchNormInConvTest, Only2dLeavesOtherConvolutionsAlone) {
  conv_module("c1", 1, 4, 6, 1, true);
  bn_module("b1", 1, 6);
  conv_module("c2", 2, 4, 6, 1, true);
  bn_module("b2", 2, 6);
  attribute("c3.weight", {6, 4, 3});
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* bn1 = b.module("b1", "b1", {b.module("c1", "c1", {x})});
  Node* bn2 = b.module("b2", "b2", {b.module("c2", "c2", {y})});
  Node* c3 = b.call("conv1d", "aten.conv1d.default", {x, b.attr("c3_weight", "c3.weight")});
  auto reads = bn_attributes("b3", 6);
  Node* bn3 =
      b.call("batch_norm", "aten.batch_norm.default",
             {c3, reads.weight, reads.bias, reads.mean, reads.var, false, 0.1, 1e-5, false});
  b.output(Tuple{{bn1, bn2, bn3}});

  PassResult result = apply(false, /*only_2d=*/true);
  EXPECT_EQ(result.changed, std::vector<std::string>{"c2"});
  ASSERT_EQ(result.skipped.size(), 1u);
  EXPECT_EQ(result.skipped[0].node, "batch_norm");
  EXPECT_EQ(result.skipped[0].reason, "folds only a Conv2d into a BatchNorm2d");
}

// Folding float32 parameters copies the weight once (the scaled weight itself): no cast to the
// dtype it has, no reshape to the shape it has. The results are new tensors, the values those
// of the definition.
TEST_F(FuseBatchNormInConvTest, FoldCopiesAFloat32WeightOnce) {
  TensorInfo weight = param({6, 4, 3, 3}), bias = param({6});
  BatchNormStats bn{param({6}), positive({6}), param({6}), param({6}), 1e-5};
  const uint64_t first = ops.make({1}, {0.0}, "float32").handle + 1;
  FoldedParams folded = fold_into_outputs(ops, bn, weight, &bias, {weight.shape, {6, 1, 1, 1}});
  const uint64_t end = ops.make({1}, {0.0}, "float32").handle;
  int weight_sized = 0;
  for (uint64_t h = first; h < end; ++h)
    weight_sized += ops.values(TensorInfo{{}, "float32", "cpu", false, false, h}).size() == 216;
  EXPECT_EQ(weight_sized, 1);
  EXPECT_NE(folded.weight.handle, weight.handle);
  EXPECT_NE(folded.bias.handle, bias.handle);
  const std::vector<double>& w = ops.values(weight);
  const std::vector<double>& out = ops.values(folded.weight);
  for (int64_t c = 0; c < 6; ++c) {
    double scale = ops.values(*bn.weight)[c] / std::sqrt(ops.values(bn.var)[c] + 1e-5);
    for (int64_t i = 0; i < 36; ++i) EXPECT_NEAR(out[c * 36 + i], w[c * 36 + i] * scale, 1e-6);
  }
}

}  // namespace
}  // namespace fxopt
