#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/fuse_conv_activation_onednn.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseConvActivationOneDnn-test";
const std::string kConv = "fxopt.runtime.onednn_conv.conv_pointwise";

class FuseConvActivationOneDnnTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false, std::vector<std::string> dtypes = {"float32"}) {
    return run_pass(FuseConvActivationOneDnn(std::move(dtypes)), program, edits, ops, kSig,
                    reverse);
  }
  std::vector<Node*> fused() {
    return program.graph.find(NodeKind::CallFunction, Symbol::intern(kConv));
  }

  TensorInfo x_ = input({1, 4, 5, 5});
};

// nn.Conv2d (kernel 3, padding 1) + residual add + ReLU: one call, the module's own tensors.
TEST_F(FuseConvActivationOneDnnTest, ModuleConvAddAndReluBecomeOneCall) {
  conv_module("conv", 2, 4, 4, 1, true);
  ModuleInfo before_module = program.modules.at("conv");
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* conv = shaped(b.module("conv", "conv", {x}), {1, 4, 5, 5});
  Node* add = shaped(b.call("add", "_operator.iadd", {conv, x}), {1, 4, 5, 5});
  b.output(Tuple{{b.call("relu", "torch.relu", {add})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"conv_pointwise"}));
  ASSERT_EQ(fused().size(), 1u);
  Node* call = fused()[0];
  ASSERT_EQ(call->args().size(), 11u);
  EXPECT_EQ(call->args()[0], Arg(x));
  EXPECT_TRUE(call->args()[1].node()->is(NodeKind::GetAttr, Symbol::intern("conv.weight")));
  EXPECT_TRUE(call->args()[2].node()->is(NodeKind::GetAttr, Symbol::intern("conv.bias")));
  EXPECT_EQ(Args(call->args().begin() + 3, call->args().end()),
            (Args{List{{1, 1}}, List{{1, 1}}, List{{1, 1}}, 1, x, "relu", List{}, None{}}));
  EXPECT_EQ(program.graph.size(), 5u);  // x, two get_attr, the call, output
  EXPECT_EQ(program.modules.at("conv").tensors, before_module.tensors);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"relu"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// torch.conv2d(x, w, b, stride, padding, dilation, groups) as Dynamo records it, then relu6 as
// F.hardtanh(x, 0.0, 6.0) fuses with its bounds; a depthwise one without bias fuses alone, as
// hardtanh(-1, 1) is no relu6, and after an add only ReLU would fuse.
TEST_F(FuseConvActivationOneDnnTest, FunctionalConvsAndTheirPostOps) {
  attribute("a.weight", {6, 4, 1, 1});
  attribute("a.bias", {6});
  attribute("d.weight", {6, 1, 3, 3});
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* aw = b.attr("a_weight", "a.weight");
  Node* ab = b.attr("a_bias", "a.bias");
  Node* a = shaped(
      b.call("conv2d", "torch.conv2d", {x, aw, ab, Tuple{{2, 2}}, Tuple{{0, 0}}, Tuple{{1, 1}}, 1}),
      {1, 6, 3, 3});
  Node* six = shaped(b.call("hardtanh", "torch.nn.functional.hardtanh", {a, 0.0, 6.0, false}),
                     {1, 6, 3, 3});
  Node* dw = b.attr("d_weight", "d.weight");
  Node* d = shaped(b.call("conv2d_1", "torch.conv2d",
                          {six, dw, None{}, Tuple{{1, 1}}, Tuple{{1, 1}}, Tuple{{1, 1}}, 6}),
                   {1, 6, 3, 3});
  Node* unit =
      shaped(b.call("hardtanh_1", "torch.nn.functional.hardtanh", {d, -1.0, 1.0}), {1, 6, 3, 3});
  b.output(Tuple{{unit}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 2u);
  ASSERT_EQ(fused().size(), 2u);
  EXPECT_EQ(Args(fused()[0]->args().begin() + 3, fused()[0]->args().end()),
            (Args{List{{2, 2}}, List{{0, 0}}, List{{1, 1}}, 1, None{}, "hardtanh", List{{0.0, 6.0}},
                  None{}}));
  EXPECT_EQ(fused()[1]->args()[2], Arg(None{}));
  EXPECT_EQ(fused()[1]->args()[6], Arg(6));
  EXPECT_EQ(fused()[1]->args()[8], Arg("none"));
  EXPECT_EQ(unit->args()[0], Arg(fused()[1]));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(FuseConvActivationOneDnnTest, AnAddThatCannotFuseStaysOutside) {
  conv_module("conv", 2, 4, 4, 1, true);
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* r = shaped(b.input("r"), {1, 4, 1, 1});  // broadcasts: not the result's shape
  Node* conv = shaped(b.module("conv", "conv", {x}), {1, 4, 5, 5});
  Node* add = shaped(b.call("add", "_operator.add", {conv, r}), {1, 4, 5, 5});
  b.output(Tuple{{add}});
  TensorInfo r_ = input({1, 4, 1, 1});
  auto before = run({{"x", x_}, {"r", r_}});

  PassResult forward = apply();
  ASSERT_EQ(fused().size(), 1u);
  EXPECT_EQ(fused()[0]->args()[7], Arg(None{}));
  EXPECT_EQ(add->args()[0], Arg(fused()[0]));
  EXPECT_LE(max_diff(before, run({{"x", x_}, {"r", r_}})), 1e-12);
}

TEST_F(FuseConvActivationOneDnnTest, SkipsWhatOneDnnCannotRunHere) {
  conv_module("low", 2, 4, 4, 1, true);
  program.modules.at("low").tensors.at("weight").dtype = "bfloat16";
  conv_module("t", 2, 4, 4, 1, true, /*transposed=*/true);
  conv_module("flat", 1, 4, 4, 1, true);
  conv_module("reflect", 2, 4, 4, 1, true);
  program.modules.at("reflect").attributes.set("padding_mode", "reflect");
  conv_module("unknown", 2, 4, 4, 1, true);
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* x1 = shaped(b.input("x1"), {4, 5});
  Node* low = b.module("low", "low", {x});
  Node* t = b.module("t", "t", {x});
  Node* flat = b.module("flat", "flat", {x1});
  Node* reflect = b.module("reflect", "reflect", {x});
  Node* unknown = b.module("unknown", "unknown", {x1});
  b.output(Tuple{{low, t, flat, reflect, unknown}});
  auto graph_before = structure();

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 5u);
  EXPECT_EQ(result.skipped[0].reason,
            "its weight is bfloat16; oneDNN's fused convolution runs float32 here");
  EXPECT_EQ(result.skipped[1].reason,
            "oneDNN's fused convolution here takes 2-D, not transposed, ones");
  EXPECT_EQ(result.skipped[2].reason,
            "oneDNN's fused convolution here takes 2-D, not transposed, ones");
  EXPECT_EQ(result.skipped[3].reason, "its padding mode is not zeros");
  EXPECT_EQ(result.skipped[4].reason, "its input is neither 3-D nor 4-D");
  EXPECT_EQ(structure(), graph_before);

  result = apply(false, {});
  EXPECT_EQ(result.skipped[0].reason,
            "oneDNN's fused convolution is not available: this torch lacks torch.ops.mkldnn's "
            "pointwise ops, or oneDNN is disabled");
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(FuseConvActivationOneDnnTest, OptionsNameDtypes) {
  EXPECT_NO_THROW(FuseConvActivationOneDnn::from_options(Dict{{{"dtypes", List{{"float32"}}}}}));
  EXPECT_THROW(FuseConvActivationOneDnn::from_options(Dict{}), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
