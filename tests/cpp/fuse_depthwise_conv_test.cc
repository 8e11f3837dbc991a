#include <gtest/gtest.h>

#include "conv_call_fixture.h"
#include "fixed_chooser.h"
#include "passes/fuse_depthwise_conv.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseDepthwiseConv-test";
const std::string kCall = "fxopt.runtime.depthwise_conv.depthwise_conv2d";

class FuseDepthwiseConvTest : public ::testing::Test,
                              protected testing::ConvCallFixture<FuseDepthwiseConv> {
 protected:
  FuseDepthwiseConvTest() : ConvCallFixture(kSig, kCall) {}

  TensorInfo x_ = input({1, 6, 6, 6});
};

// TensorFlow's 'same' padding before a stride-2 depthwise convolution, then relu6 as
// hardtanh(0, 6): one call with the pad's one-sided zeros and the clamp, asked of the chooser
// with the image's own size; reverse rebuilds all three nodes.
TEST_F(FuseDepthwiseConvTest, OneSidedPadConvolutionAndRelu6BecomeOneCall) {
  attribute("d.weight", {6, 1, 3, 3});
  attribute("d.bias", {6});
  Node* x = shaped(b.input("x"), {1, 6, 6, 6});
  Node* padded = shaped(
      b.call("pad", "torch._C._nn.pad", {x, Tuple{{0, 1, 0, 1}}, "constant", 0.0}), {1, 6, 7, 7});
  Node* dw = conv("conv2d", padded, b.attr("d_weight", "d.weight"), b.attr("d_bias", "d.bias"), 2,
                  0, 6, {1, 6, 3, 3});
  Node* six = shaped(b.call("hardtanh", "torch.nn.functional.hardtanh", {dw, 0.0, 6.0, false}),
                     {1, 6, 3, 3});
  b.output(Tuple{{six}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  testing::FixedChooser chooser("fxopt");
  PassResult forward = apply(false, &chooser);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"depthwise_conv"}));
  ASSERT_EQ(chooser.queries.size(), 1u);
  EXPECT_EQ(chooser.queries[0].op, "depthwise_conv2d");
  EXPECT_EQ(chooser.queries[0].shape, (std::vector<int64_t>{1, 6, 6, 6, 3, 3, 2, 2, 0, 1, 0, 1}));
  EXPECT_EQ(chooser.queries[0].variant, "relu6");
  EXPECT_EQ(chooser.queries[0].candidates, (std::vector<std::string>{"left", "fxopt"}));
  ASSERT_EQ(fused().size(), 1u);
  Node* call = fused()[0];
  EXPECT_EQ(call->args()[0], Arg(x));
  EXPECT_EQ(Args(call->args().begin() + 3, call->args().end()),
            (Args{List{{2, 2}}, List{{0, 1, 0, 1}}, 0.0, 6.0}));
  EXPECT_EQ(program.graph.size(), 5u);  // x, two get_attr, the call, output
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// nn.Conv2d with groups = channels (padding 1) and ReLU, without a pad: the module's tensors,
// its own padding on all four sides, the lower bound alone; the static choice is fxopt's.
TEST_F(FuseDepthwiseConvTest, DepthwiseModuleWithReluTakesItsOwnPadding) {
  conv_module("conv", 2, 6, 6, 6, true);
  Node* x = shaped(b.input("x"), {1, 6, 6, 6});
  Node* c = shaped(b.module("conv", "conv", {x}), {1, 6, 6, 6});
  b.output(Tuple{{shaped(b.call("relu", "torch.relu", {c}), {1, 6, 6, 6})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  ASSERT_EQ(fused().size(), 1u);
  Node* call = fused()[0];
  EXPECT_TRUE(call->args()[1].node()->is(NodeKind::GetAttr, Symbol::intern("conv.weight")));
  EXPECT_TRUE(call->args()[2].node()->is(NodeKind::GetAttr, Symbol::intern("conv.bias")));
  EXPECT_EQ(Args(call->args().begin() + 3, call->args().end()),
            (Args{List{{1, 1}}, List{{1, 1, 1, 1}}, 0.0, None{}}));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// What stays: a grouped convolution that is not depthwise, a dilated depthwise one, a pad with
// a second reader (the convolution is taken without it), GELU (no clamp: its own node), and a
// convolution the chooser measured faster as it is.
TEST_F(FuseDepthwiseConvTest, SkipsWhatTheKernelDoesNotTake) {
  attribute("g.weight", {6, 2, 3, 3});
  attribute("d.weight", {6, 1, 3, 3});
  Node* x = shaped(b.input("x"), {1, 6, 6, 6});
  Node* g = conv("grouped", x, b.attr("g_weight", "g.weight"), None{}, 1, 1, 3, {1, 6, 6, 6});
  Node* dw = b.attr("d_weight", "d.weight");
  Node* dilated = conv("dilated", g, dw, None{}, 1, 2, 6, {1, 6, 6, 6}, 2);
  Node* padded =
      shaped(b.call("pad", "torch._C._nn.pad", {dilated, Tuple{{1, 1, 1, 1}}, "constant", 0.0}),
             {1, 6, 8, 8});
  Node* shared = conv("shared_pad", padded, dw, None{}, 1, 0, 6, {1, 6, 6, 6});
  Node* gelu = shaped(b.call("gelu", "torch._C._nn.gelu", {shared}), {1, 6, 6, 6});
  Node* slow = conv("slow", gelu, dw, None{}, 1, 1, 6, {1, 6, 6, 6});
  b.output(Tuple{{slow, padded}});
  auto before = run({{"x", x_}});

  // The convolution reading the GELU measured faster as it is.
  testing::FirstCandidateFor chooser("gelu");
  PassResult forward = apply(false, &chooser);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"depthwise_conv"}));
  ASSERT_EQ(fused().size(), 1u);
  EXPECT_EQ(fused()[0]->args()[0], Arg(padded));
  EXPECT_EQ(fused()[0]->args()[4], Arg(List{{0, 0, 0, 0}}));
  EXPECT_EQ(fused()[0]->args()[5], Arg(None{}));
  EXPECT_EQ(program.graph.find(NodeKind::CallFunction, Symbol::intern("torch._C._nn.gelu")).size(),
            1u);
  std::map<std::string, std::string> why;
  for (const Skip& skip : forward.skipped) why[skip.node] = skip.reason;
  EXPECT_NE(why["grouped"].find("not depthwise"), std::string::npos);
  EXPECT_NE(why["dilated"].find("dilated"), std::string::npos);
  EXPECT_NE(why["slow"].find("measured faster"), std::string::npos);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
}

}  // namespace
}  // namespace fxopt
