#include "passes/quantize_convs_int8.h"

#include <gtest/gtest.h>

#include "fixed_chooser.h"
#include "norm_fixtures.h"
#include "ops/effects.h"
#include "ops/targets.h"
#include "passes/eliminate_common_subexpressions.h"

namespace fxopt {
namespace {

const std::string kSig = "QuantizeConvsInt8-test";
const std::string kCall = "fxopt.runtime.static_int8_conv.int8_conv2d";

class QuantizeConvsInt8Test : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(std::map<std::string, InputQuantization> scales, bool reverse = false,
                   bool choose_only = false) {
    return run_pass(QuantizeConvsInt8(std::move(scales), "float32", choose_only), program, edits,
                    ops, kSig, reverse);
  }
  std::vector<Node*> calls() {
    return program.graph.find(NodeKind::CallFunction, Symbol::intern(kCall));
  }
  // The quantization of an input in [-3, 3] (the fixture's inputs stay within it).
  static InputQuantization wide() { return {6.0 / 255, 128}; }

  TensorInfo x_ = input({1, 4, 5, 5});
};

// nn.Conv2d + residual add + ReLU: one int8 call on weights quantized next to the module's,
// whose result is the float convolution's up to the rounding of x and the weights; reverse
// gives the same graph, the same bits, and drops the int8 tensors.
TEST_F(QuantizeConvsInt8Test, ModuleConvAddAndReluBecomeOneInt8Call) {
  conv_module("conv", 2, 4, 4, 1, true);
  ModuleInfo before_module = program.modules.at("conv");
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* conv = shaped(b.module("conv", "conv", {x}), {1, 4, 5, 5});
  Node* add = shaped(b.call("add", "_operator.add", {conv, x}), {1, 4, 5, 5});
  b.output(Tuple{{b.call("relu", "torch.relu", {add})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();
  size_t attributes_before = program.attributes.size();

  PassResult forward = apply({{"conv", wide()}});
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"int8_conv2d"}));
  ASSERT_EQ(calls().size(), 1u);
  Node* call = calls()[0];
  ASSERT_EQ(call->args().size(), 16u);
  EXPECT_EQ(call->args()[0], Arg(x));
  EXPECT_TRUE(call->args()[1].node()->is(NodeKind::GetAttr, Symbol::intern("conv.weight_int8")));
  EXPECT_TRUE(
      call->args()[2].node()->is(NodeKind::GetAttr, Symbol::intern("conv.weight_int8_scale")));
  EXPECT_TRUE(call->args()[3].node()->is(NodeKind::GetAttr, Symbol::intern("conv.bias")));
  EXPECT_EQ(Args(call->args().begin() + 4, call->args().end()),
            (Args{List{{1, 1}}, List{{1, 1}}, List{{1, 1}}, 1, 6.0 / 255, 128, x, "relu", List{},
                  None{}, false, "onednn"}));  // the input x is the caller's: added into a copy
  EXPECT_FALSE(is_mutating(program, *call));
  const TensorInfo& values = program.attributes.at("conv.weight_int8");
  EXPECT_EQ(values.dtype, "int8");
  EXPECT_EQ(values.shape, (std::vector<int64_t>{4, 4, 3, 3}));
  EXPECT_EQ(program.attributes.at("conv.weight_int8_scale").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(program.modules.at("conv").tensors, before_module.tensors);  // the original stays
  double error = max_diff(before, run({{"x", x_}}));
  EXPECT_GT(error, 0.0);  // int8: not the float result
  EXPECT_LT(error, 0.1);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply({}, /*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"relu"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(program.attributes.size(), attributes_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// Dynamo's torch.conv2d with get_attr weights: relu6 (hardtanh 0..6) and SiLU run in the call;
// GELU, which oneDNN's int8 convolution does not apply, stays after it.
TEST_F(QuantizeConvsInt8Test, FunctionalConvsTakeTheActivationsOneDnnApplies) {
  attribute("a.weight", {6, 4, 1, 1});
  attribute("a.bias", {6});
  attribute("d.weight", {6, 1, 3, 3});
  attribute("g.weight", {6, 6, 1, 1});
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* a = shaped(b.call("conv2d", "torch.conv2d",
                          {x, b.attr("a_weight", "a.weight"), b.attr("a_bias", "a.bias"),
                           Tuple{{2, 2}}, Tuple{{0, 0}}, Tuple{{1, 1}}, 1}),
                   {1, 6, 3, 3});
  Node* six = shaped(b.call("hardtanh", "torch.nn.functional.hardtanh", {a, 0.0, 6.0, false}),
                     {1, 6, 3, 3});
  Node* d = shaped(b.call("conv2d_1", "torch.conv2d",
                          {six, b.attr("d_weight", "d.weight"), None{}, Tuple{{1, 1}},
                           Tuple{{1, 1}}, Tuple{{1, 1}}, 6}),
                   {1, 6, 3, 3});
  Node* silu = shaped(b.call("silu", "torch.nn.functional.silu", {d}), {1, 6, 3, 3});
  Node* g = shaped(b.call("conv2d_2", "torch.conv2d",
                          {silu, b.attr("g_weight", "g.weight"), None{}, Tuple{{1, 1}},
                           Tuple{{0, 0}}, Tuple{{1, 1}}, 1}),
                   {1, 6, 3, 3});
  Node* gelu = shaped(b.call("gelu", "torch._C._nn.gelu", {g}), {1, 6, 3, 3});
  b.output(Tuple{{gelu}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward =
      apply({{"conv2d", wide()}, {"conv2d_1", {6.0 / 255, 0}}, {"conv2d_2", {1.0 / 255, 0}}});
  EXPECT_EQ(forward.changed.size(), 3u);
  ASSERT_EQ(calls().size(), 3u);
  EXPECT_EQ(Args(calls()[0]->args().begin() + 11, calls()[0]->args().end()),
            (Args{"hardtanh", List{{0.0, 6.0}}, None{}, false, "onednn"}));
  EXPECT_EQ(calls()[1]->args()[3], Arg(None{}));  // no bias
  EXPECT_EQ(calls()[1]->args()[7], Arg(6));       // depthwise
  EXPECT_EQ(calls()[1]->args()[11], Arg("swish"));
  EXPECT_EQ(calls()[2]->args()[11], Arg("none"));
  EXPECT_EQ(gelu->args()[0], Arg(calls()[2]));
  EXPECT_TRUE(program.attributes.contains("a.weight_int8"));
  EXPECT_TRUE(program.attributes.contains("d.weight_int8_scale"));
  EXPECT_LT(max_diff(before, run({{"x", x_}})), 0.2);

  apply({}, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("a.weight_int8"));
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// A residual that is a tensor of its own, read before the add only by an op making a tensor of
// its own (a ResNet block's input, read by the block's first convolution): the call adds into
// it (its last argument true), so it writes that value (ops/effects.h), and a later
// EliminateCommonSubexpressions keeps an equal value apart rather than give it a reader the
// write would corrupt. Read after the add too, the residual is added into a copy.
TEST_F(QuantizeConvsInt8Test, AResidualNothingElseReadsIsAddedIntoInPlace) {
  conv_module("conv", 2, 4, 4, 1, true);
  conv_module("conv_1", 2, 4, 4, 1, true);
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* dies = shaped(b.call("relu", "torch.relu", {x}), {1, 4, 5, 5});
  Node* early = shaped(b.call("mul_1", "_operator.mul", {dies, 3.0}), {1, 4, 5, 5});
  Node* equal = shaped(b.call("relu_1", "torch.relu", {x}), {1, 4, 5, 5});
  Node* kept = shaped(b.call("mul", "_operator.mul", {x, 2.0}), {1, 4, 5, 5});
  Node* conv = shaped(b.module("conv", "conv", {x}), {1, 4, 5, 5});
  Node* add = shaped(b.call("add", "_operator.add", {conv, dies}), {1, 4, 5, 5});
  Node* conv_1 = shaped(b.module("conv_1", "conv_1", {x}), {1, 4, 5, 5});
  Node* add_1 = shaped(b.call("add_1", "_operator.add", {conv_1, kept}), {1, 4, 5, 5});
  Node* late = shaped(b.call("mul_2", "_operator.mul", {kept, 3.0}), {1, 4, 5, 5});
  b.output(Tuple{{add, early, equal, add_1, late}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  apply({{"conv", wide()}, {"conv_1", wide()}});
  ASSERT_EQ(calls().size(), 2u);
  Node* into_residual = calls()[0];
  ASSERT_EQ(into_residual->args()[10], Arg(dies));
  EXPECT_EQ(into_residual->args()[targets::kInt8Conv2dResidualDies], Arg(true));
  EXPECT_TRUE(is_mutating(program, *into_residual));
  EXPECT_TRUE(written_in_place(program).contains(dies));
  ASSERT_EQ(calls()[1]->args()[10], Arg(kept));
  EXPECT_EQ(calls()[1]->args()[targets::kInt8Conv2dResidualDies], Arg(false));
  EXPECT_FALSE(is_mutating(program, *calls()[1]));
  EXPECT_LT(max_diff(before, run({{"x", x_}})), 0.1);

  PassResult cse = run_pass(EliminateCommonSubexpressions(), program, edits, ops, "cse", false);
  EXPECT_TRUE(cse.changed.empty());
  ASSERT_EQ(cse.skipped.size(), 1u);
  EXPECT_EQ(cse.skipped[0].node, "relu_1");
  EXPECT_EQ(program.graph.find(NodeKind::CallFunction, Symbol::intern("torch.relu")).size(), 2u);

  apply({}, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(QuantizeConvsInt8Test, SkipsWithoutAScaleOrWhatOneDnnCannotRun) {
  conv_module("none", 2, 4, 4, 1, true);
  conv_module("bad", 2, 4, 4, 1, true);
  conv_module("low", 2, 4, 4, 1, true);
  program.modules.at("low").tensors.at("weight").dtype = "bfloat16";
  conv_module("t", 2, 4, 4, 1, true, /*transposed=*/true);
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  b.output(Tuple{{b.module("none", "none", {x}), b.module("bad", "bad", {x}),
                  b.module("low", "low", {x}), b.module("t", "t", {x})}});
  auto graph_before = structure();

  PassResult result = apply({{"bad", {0.0, 3}}, {"low", wide()}, {"t", wide()}, {"other", wide()}});
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 4u);
  EXPECT_EQ(result.skipped[0].reason, "no calibrated input scale (option 'input_scales')");
  EXPECT_EQ(result.skipped[1].reason,
            "its input scale is not positive and finite with a zero point in [0, 255]");
  EXPECT_EQ(result.skipped[2].reason, "its weight is bfloat16; int8 runs float32 here");
  EXPECT_EQ(result.skipped[3].reason,
            "oneDNN's fused convolution here takes 2-D, not transposed, ones");
  EXPECT_EQ(structure(), graph_before);

  // Choosing only: every convolution that could go int8 is skipped once its kernel is known.
  result = apply({}, false, /*choose_only=*/true);
  EXPECT_TRUE(result.changed.empty());
  EXPECT_EQ(result.skipped[0].reason, "option 'choose_only': its kernel is in the choices");
  EXPECT_EQ(structure(), graph_before);
}

// A 1x1 convolution and a depthwise one may stay in float on fxopt's own kernels, which the
// int8 call must beat as well as the float convolution (the 1x1 one may also run in int8 on
// fxopt's kernel); a 3x3 one has the two candidates.
// Measured faster, fxopt's kernel leaves the convolution in float.
TEST_F(QuantizeConvsInt8Test, OneByOneAndDepthwiseConvolutionsAreAlsoTimedOnFxoptsKernels) {
  attribute("p.weight", {4, 4, 1, 1});
  attribute("d.weight", {4, 1, 3, 3});
  conv_module("full", 2, 4, 4, 1, false);
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* p = shaped(b.call("p", "torch.conv2d",
                          {x, b.attr("p_weight", "p.weight"), None{}, Tuple{{1, 1}}, Tuple{{0, 0}},
                           Tuple{{1, 1}}, 1}),
                   {1, 4, 5, 5});
  Node* d = shaped(b.call("d", "torch.conv2d",
                          {p, b.attr("d_weight", "d.weight"), None{}, Tuple{{1, 1}}, Tuple{{1, 1}},
                           Tuple{{1, 1}}, 4}),
                   {1, 4, 5, 5});
  b.output(Tuple{{shaped(b.module("full", "full", {d}), {1, 4, 5, 5})}});
  auto graph_before = structure();

  testing::FixedChooser chooser(std::vector<std::string>{"float32_fxopt", "int8_onednn"});
  PassResult result = run_pass(
      QuantizeConvsInt8({{"p", wide()}, {"d", wide()}, {"full", wide()}}, "float32", false),
      program, edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 3u);
  EXPECT_EQ(chooser.queries[0].candidates,
            (std::vector<std::string>{"float32", "int8_onednn", "float32_fxopt", "int8_fxopt"}));
  EXPECT_EQ(chooser.queries[1].candidates,
            (std::vector<std::string>{"float32", "int8_onednn", "float32_fxopt"}));
  EXPECT_EQ(chooser.queries[2].candidates, (std::vector<std::string>{"float32", "int8_onednn"}));
  EXPECT_EQ(result.changed, (std::vector<std::string>{"int8_conv2d"}));  // the 3x3 one
  ASSERT_GE(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason,
            "the float32_fxopt convolution was measured faster here (see the pass's choices)");
  EXPECT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0]->args()[0], Arg(d));

  run_pass(QuantizeConvsInt8({}, "float32", false), program, edits, ops, kSig, true);
  EXPECT_EQ(structure(), graph_before);
}

// Picked, fxopt's int8 kernel makes the same call with kernel "fxopt": the same computation
// (the reference interpreter's), reversed like the other. It is a candidate only for a 1x1
// convolution of stride 1 whose activation it applies (none, ReLU, ReLU6), not SiLU.
TEST_F(QuantizeConvsInt8Test, OneByOneConvolutionsMayRunOnFxoptsInt8Kernel) {
  attribute("p.weight", {4, 4, 1, 1});
  attribute("p.bias", {4});
  attribute("s.weight", {4, 4, 1, 1});
  attribute("h.weight", {4, 4, 1, 1});
  Node* x = shaped(b.input("x"), {1, 4, 5, 5});
  Node* p = shaped(b.call("p", "torch.conv2d",
                          {x, b.attr("p_weight", "p.weight"), b.attr("p_bias", "p.bias"),
                           Tuple{{1, 1}}, Tuple{{0, 0}}, Tuple{{1, 1}}, 1}),
                   {1, 4, 5, 5});
  Node* add = shaped(b.call("add", "_operator.add", {p, x}), {1, 4, 5, 5});
  Node* relu = shaped(b.call("relu", "torch.relu", {add}), {1, 4, 5, 5});
  Node* s = shaped(b.call("s", "torch.conv2d",
                          {relu, b.attr("s_weight", "s.weight"), None{}, Tuple{{2, 2}},
                           Tuple{{0, 0}}, Tuple{{1, 1}}, 1}),
                   {1, 4, 3, 3});
  Node* h = shaped(b.call("h", "torch.conv2d",
                          {s, b.attr("h_weight", "h.weight"), None{}, Tuple{{1, 1}}, Tuple{{0, 0}},
                           Tuple{{1, 1}}, 1}),
                   {1, 4, 3, 3});
  b.output(Tuple{{shaped(b.call("silu", "torch.nn.functional.silu", {h}), {1, 4, 3, 3})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  testing::FixedChooser chooser(std::vector<std::string>{"int8_fxopt", "int8_onednn"});
  PassResult result =
      run_pass(QuantizeConvsInt8({{"p", wide()}, {"s", wide()}, {"h", wide()}}, "float32", false),
               program, edits, ops, kSig, false, chooser);
  ASSERT_EQ(chooser.queries.size(), 3u);
  EXPECT_EQ(chooser.queries[0].candidates,
            (std::vector<std::string>{"float32", "int8_onednn", "float32_fxopt", "int8_fxopt"}));
  EXPECT_EQ(chooser.queries[0].variant, "relu,add");
  EXPECT_EQ(chooser.queries[1].candidates,
            (std::vector<std::string>{"float32", "int8_onednn"}));  // stride 2
  EXPECT_EQ(chooser.queries[2].candidates,
            (std::vector<std::string>{"float32", "int8_onednn", "float32_fxopt"}));  // SiLU
  ASSERT_EQ(result.changed.size(), 3u);
  ASSERT_EQ(calls().size(), 3u);
  EXPECT_EQ(calls()[0]->args()[targets::kInt8Conv2dKernel], Arg("fxopt"));
  EXPECT_EQ(calls()[0]->args()[11], Arg("relu"));
  EXPECT_EQ(calls()[1]->args()[targets::kInt8Conv2dKernel], Arg("onednn"));
  EXPECT_EQ(calls()[2]->args()[targets::kInt8Conv2dKernel], Arg("onednn"));
  double error = max_diff(before, run({{"x", x_}}));
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 0.2);

  run_pass(QuantizeConvsInt8({}, "float32", false), program, edits, ops, kSig, true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(QuantizeConvsInt8Test, Options) {
  EXPECT_NE(QuantizeConvsInt8::from_options(Dict{}), nullptr);
  EXPECT_NE(QuantizeConvsInt8::from_options(Dict{
                {{"input_scales", Dict{{{"c", List{{0.5, 3}}}}}}, {"compare_with", "bfloat16"}}}),
            nullptr);
  EXPECT_THROW(QuantizeConvsInt8::from_options(Dict{{{"input_scales", 1}}}), std::invalid_argument);
  EXPECT_THROW(
      QuantizeConvsInt8::from_options(Dict{{{"input_scales", Dict{{{"c", List{{0.5}}}}}}}}),
      std::invalid_argument);
  EXPECT_THROW(
      QuantizeConvsInt8::from_options(Dict{{{"input_scales", Dict{{{"c", List{{0.5, 0.5}}}}}}}}),
      std::invalid_argument);
  EXPECT_THROW(QuantizeConvsInt8::from_options(Dict{{{"compare_with", "float16"}}}),
               std::invalid_argument);
  EXPECT_THROW(QuantizeConvsInt8::from_options(Dict{{{"choose_only", 1}}}), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
