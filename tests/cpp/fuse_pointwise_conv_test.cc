#include <gtest/gtest.h>

#include "conv_call_fixture.h"
#include "fixed_chooser.h"
#include "passes/fuse_pointwise_conv.h"

namespace fxopt {
namespace {

const std::string kSig = "FusePointwiseConv-test";
const std::string kCall = "fxopt.runtime.pointwise_conv.pointwise_conv2d";

class FusePointwiseConvTest : public ::testing::Test,
                              protected testing::ConvCallFixture<FusePointwiseConv> {
 protected:
  FusePointwiseConvTest() : ConvCallFixture(kSig, kCall) {}

  TensorInfo x_ = input({1, 8, 4, 4});
  TensorInfo r_ = input({1, 6, 4, 4});
};

// MobileNetV2's projection: a bfloat16 1x1 convolution plus the block's input, then ReLU (the
// one activation taken after an add): one call with the residual and the lower bound, asked of
// the chooser as a convolution; reverse rebuilds all three nodes.
TEST_F(FusePointwiseConvTest, ConvolutionResidualAddAndReluBecomeOneCall) {
  attribute("p.weight", {6, 8, 1, 1}, "bfloat16");
  attribute("p.bias", {6}, "bfloat16");
  Node* x = shaped(b.input("x"), {1, 8, 4, 4});
  Node* r = shaped(b.input("r"), {1, 6, 4, 4});
  Node* c = conv("conv2d", x, b.attr("p_weight", "p.weight"), b.attr("p_bias", "p.bias"), 1, 0, 1,
                 {1, 6, 4, 4});
  Node* sum = shaped(b.call("add", "_operator.add", {c, r}), {1, 6, 4, 4});
  b.output(Tuple{{shaped(b.call("relu", "torch.relu", {sum}), {1, 6, 4, 4})}});
  auto before = run({{"x", x_}, {"r", r_}});
  auto graph_before = structure();

  testing::FixedChooser chooser("fxopt");
  PassResult forward = apply(false, &chooser);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"pointwise_conv"}));
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].op, "pointwise_conv2d");
  EXPECT_EQ(chooser.queries[0].shape,
            (std::vector<int64_t>{1, 8, 4, 4, 6, 1, 1, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(chooser.queries[0].dtype, "bfloat16");
  EXPECT_EQ(chooser.queries[0].variant, "relu,add");
  EXPECT_EQ(chooser.queries[0].candidates, (std::vector<std::string>{"left", "fxopt"}));
  ASSERT_EQ(fused().size(), 1u);
  Node* call = fused()[0];
  EXPECT_EQ(call->args()[0], Arg(x));
  EXPECT_EQ(Args(call->args().begin() + 3, call->args().end()), (Args{r, 0.0, None{}}));
  EXPECT_EQ(program.graph.size(), 6u);  // x, r, two get_attr, the call, output
  EXPECT_LE(max_diff(before, run({{"x", x_}, {"r", r_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}, {"r", r_}})), 0.0);
}

// A batch traced as a symbol: the residual's batch is the convolution's when both read the same
// symbol's number (Node::shape); another symbol, or a size fx named not at all (-1), proves
// nothing and the add stays.
class SymbolicBatchTest : public FusePointwiseConvTest {
 protected:
  // Whether the pass takes a residual of batch `residual_batch` into a convolution of batch
  // `conv_batch`; the result computes what the graph did either way.
  bool takes_residual(int64_t conv_batch, int64_t residual_batch) {
    attribute("p.weight", {6, 8, 1, 1});
    Node* x = shaped(b.input("x"), {conv_batch, 8, 4, 4});
    Node* r = shaped(b.input("r"), {residual_batch, 6, 4, 4});
    Node* c =
        conv("conv2d", x, b.attr("p_weight", "p.weight"), None{}, 1, 0, 1, {conv_batch, 6, 4, 4});
    b.output(Tuple{{shaped(b.call("add", "_operator.add", {c, r}), {conv_batch, 6, 4, 4})}});
    auto before = run({{"x", x_}, {"r", r_}});
    testing::FixedChooser chooser("fxopt");
    apply(false, &chooser);
    EXPECT_LE(max_diff(before, run({{"x", x_}, {"r", r_}})), 1e-12);
    EXPECT_EQ(fused().size(), 1u);  // the convolution is fused either way
    return fused().size() == 1 && fused()[0]->args()[3] == Arg(r);
  }
};

TEST_F(SymbolicBatchTest, TheSameSymbolIsTakenIn) { EXPECT_TRUE(takes_residual(-2, -2)); }
TEST_F(SymbolicBatchTest, AnotherSymbolIsNot) { EXPECT_FALSE(takes_residual(-2, -3)); }
TEST_F(SymbolicBatchTest, AnUnnamedSizeIsNot) { EXPECT_FALSE(takes_residual(-1, -1)); }

// An expansion in float32: no bias, ReLU6 as hardtanh(0, 6), the static choice (fxopt's kernel).
TEST_F(FusePointwiseConvTest, Float32ConvolutionAndRelu6WithoutBias) {
  attribute("e.weight", {6, 8, 1, 1});
  Node* x = shaped(b.input("x"), {1, 8, 4, 4});
  Node* c = conv("conv2d", x, b.attr("e_weight", "e.weight"), None{}, 1, 0, 1, {1, 6, 4, 4});
  b.output(Tuple{{shaped(b.call("hardtanh", "torch.nn.functional.hardtanh", {c, 0.0, 6.0, false}),
                         {1, 6, 4, 4})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  apply();
  ASSERT_EQ(fused().size(), 1u);
  EXPECT_EQ(Args(fused()[0]->args().begin() + 2, fused()[0]->args().end()),
            (Args{None{}, None{}, 0.0, 6.0}));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// What stays: a 3x3 convolution, a 1x1 one at stride 2, a grouped one, a float64 one, GELU (no
// clamp: its own node, the convolution before it taken alone), and a convolution the chooser
// measured faster as it is.
TEST_F(FusePointwiseConvTest, SkipsWhatTheKernelDoesNotTake) {
  attribute("k3.weight", {8, 8, 3, 3}, "bfloat16");
  attribute("s2.weight", {8, 8, 1, 1}, "bfloat16");
  attribute("g.weight", {8, 4, 1, 1}, "bfloat16");
  attribute("f.weight", {8, 8, 1, 1}, "float64");
  attribute("one.weight", {8, 8, 1, 1}, "bfloat16");
  Node* x = shaped(b.input("x"), {1, 8, 4, 4});
  Node* k3 = conv("k3", x, b.attr("k3_weight", "k3.weight"), None{}, 1, 1, 1, {1, 8, 4, 4});
  Node* s2 = conv("s2", k3, b.attr("s2_weight", "s2.weight"), None{}, 2, 0, 1, {1, 8, 2, 2});
  Node* g = conv("grouped", s2, b.attr("g_weight", "g.weight"), None{}, 1, 0, 2, {1, 8, 2, 2});
  Node* f = conv("float64", g, b.attr("f_weight", "f.weight"), None{}, 1, 0, 1, {1, 8, 2, 2});
  Node* one = b.attr("one_weight", "one.weight");
  Node* taken = conv("taken", f, one, None{}, 1, 0, 1, {1, 8, 2, 2});
  Node* gelu = shaped(b.call("gelu", "torch._C._nn.gelu", {taken}), {1, 8, 2, 2});
  Node* slow = conv("slow", gelu, one, None{}, 1, 0, 1, {1, 8, 2, 2});
  b.output(Tuple{{slow}});
  auto before = run({{"x", x_}});

  // The convolution reading the GELU measured faster as it is.
  testing::FirstCandidateFor chooser("gelu");
  PassResult forward = apply(false, &chooser);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"pointwise_conv"}));
  ASSERT_EQ(fused().size(), 1u);
  EXPECT_EQ(fused()[0]->args()[0], Arg(f));
  EXPECT_EQ(fused()[0]->args()[4], Arg(None{}));
  EXPECT_EQ(program.graph.find(NodeKind::CallFunction, Symbol::intern("torch._C._nn.gelu")).size(),
            1u);
  std::map<std::string, std::string> why;
  for (const Skip& skip : forward.skipped) why[skip.node] = skip.reason;
  for (const char* name : {"k3", "s2", "grouped"})
    EXPECT_NE(why[name].find("not a 1x1 convolution"), std::string::npos) << name;
  EXPECT_NE(why["float64"].find("float32 or bfloat16 weights"), std::string::npos);
  EXPECT_NE(why["slow"].find("measured faster"), std::string::npos);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
}

}  // namespace
}  // namespace fxopt
