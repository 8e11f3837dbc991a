#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/fold_pad_in_conv.h"

namespace fxopt {
namespace {

const std::string kSig = "FoldPadInConv-test";

class FoldPadInConvTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(FoldPadInConv(), program, edits, ops, kSig, reverse);
  }
  Node* pad(const std::string& name, Node* x, std::vector<int64_t> widths,
            const char* target = "torch._C._nn.pad") {
    Tuple w;
    for (int64_t v : widths) w.items.push_back(v);
    return b.call(name, target, {x, w, "constant", 0.0});
  }

  TensorInfo x_ = input({1, 4, 5, 5});
};

// A symmetric pad before nn.Conv2d (padding 1): one torch.conv2d with padding 1 + the widths,
// reading the module's tensors; a pad by nothing folds too.
TEST_F(FoldPadInConvTest, SymmetricPadsBecomeTheConvolutionsPadding) {
  conv_module("conv", 2, 4, 4, 1, true);
  attribute("c.weight", {6, 4, 1, 1});
  Node* x = b.input("x");
  Node* cw = b.attr("c_weight", "c.weight");
  Node* padded = pad("pad", x, {2, 2, 1, 1});
  Node* conv = b.module("conv", "conv", {padded});
  Node* none = pad("pad_1", conv, {0, 0, 0, 0});
  Node* pointwise = b.call("conv2d", "torch.conv2d",
                           {none, cw, None{}, Tuple{{1, 1}}, Tuple{{0, 0}}, Tuple{{1, 1}}, 1});
  b.output(Tuple{{pointwise}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();
  ModuleInfo before_module = program.modules.at("conv");

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 2u);
  EXPECT_TRUE(forward.skipped.empty());
  std::vector<Node*> convs =
      program.graph.find(NodeKind::CallFunction, Symbol::intern("torch.conv2d"));
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(convs[0]->args()[0], Arg(x));
  EXPECT_TRUE(convs[0]->args()[1].node()->is(NodeKind::GetAttr, Symbol::intern("conv.weight")));
  EXPECT_TRUE(convs[0]->args()[2].node()->is(NodeKind::GetAttr, Symbol::intern("conv.bias")));
  EXPECT_EQ(Args(convs[0]->args().begin() + 3, convs[0]->args().end()),
            (Args{List{{1, 1}}, List{{2, 3}}, List{{1, 1}}, 1}));
  EXPECT_EQ(convs[1]->args()[0], Arg(convs[0]));
  EXPECT_EQ(convs[1]->args()[1], Arg(cw));
  EXPECT_EQ(convs[1]->args()[4], Arg(List{{0, 0}}));
  EXPECT_TRUE(
      program.graph.find(NodeKind::CallFunction, Symbol::intern("torch._C._nn.pad")).empty());
  EXPECT_EQ(program.modules.at("conv").tensors, before_module.tensors);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// torch.export's spellings: aten.constant_pad_nd and aten.pad before aten.conv2d stay ATen.
TEST_F(FoldPadInConvTest, AtenPadsFoldIntoAtenConvolutions) {
  attribute("w", {4, 4, 3, 3});
  Node* x = b.input("x");
  Node* w = b.attr("w", "w");
  Node* p1 =
      b.call("constant_pad_nd", "aten.constant_pad_nd.default", {x, List{{1, 1, 1, 1}}, 0.0});
  Node* c1 = b.call("conv2d", "aten.conv2d.default",
                    {p1, w, None{}, List{{1, 1}}, List{{0, 0}}, List{{1, 1}}, 1});
  Node* p2 = b.call("pad", "aten.pad.default", {c1, List{{1, 1, 0, 0}}, "constant", None{}});
  Node* c2 = b.call("conv2d_1", "aten.conv2d.default",
                    {p2, w, None{}, List{{1, 1}}, List{{0, 0}}, List{{1, 1}}, 1});
  b.output(Tuple{{c2}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  std::vector<Node*> convs =
      program.graph.find(NodeKind::CallFunction, Symbol::intern("aten.conv2d.default"));
  ASSERT_EQ(convs.size(), 2u);
  EXPECT_EQ(convs[0]->args()[4], Arg(List{{1, 1}}));
  EXPECT_EQ(convs[1]->args()[4], Arg(List{{0, 1}}));
  EXPECT_EQ(program.graph.size(), 5u);  // x, w, two convolutions, output
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
}

// What a convolution cannot absorb stays, with the reason.
TEST_F(FoldPadInConvTest, SkipsPadsAConvolutionCannotAbsorb) {
  conv_module("conv", 2, 4, 4, 1, true);
  conv_module("up", 2, 4, 4, 1, true, /*transposed=*/true);
  Node* x = b.input("x");
  Node* same = pad("same", x, {0, 1, 0, 1});  // a stride-2 "same" pad: asymmetric
  Node* channels = pad("channels", x, {0, 0, 0, 0, 1, 1});
  Node* shared = pad("shared", x, {1, 1, 1, 1});  // read twice
  Node* reflect = b.call("reflect", "torch._C._nn.pad", {x, Tuple{{1, 1, 1, 1}}, "reflect"});
  Node* ones = b.call("ones", "torch._C._nn.pad", {x, Tuple{{1, 1, 1, 1}}, "constant", 1.0});
  Node* transposed = pad("transposed", x, {1, 1, 1, 1});
  Args outs = {b.module("conv", "conv", {same}),      b.module("conv_1", "conv", {channels}),
               b.module("conv_2", "conv", {shared}),  shared,
               b.module("conv_3", "conv", {reflect}), b.module("conv_4", "conv", {ones}),
               b.module("up", "up", {transposed})};
  b.output(Tuple{outs});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_TRUE(forward.changed.empty());
  std::map<std::string, std::string> reasons;
  for (const auto& skip : forward.skipped) reasons[skip.node] = skip.reason;
  EXPECT_NE(reasons["same"].find("differently"), std::string::npos);
  EXPECT_NE(reasons["channels"].find("channel"), std::string::npos);
  EXPECT_EQ(reasons["shared"], "it has more than one reader");
  EXPECT_EQ(reasons["reflect"], "its mode is not constant");
  EXPECT_EQ(reasons["ones"], "it pads with a value other than zero");
  EXPECT_NE(reasons["transposed"].find("transposed"), std::string::npos);
  EXPECT_EQ(structure(), graph_before);
}

}  // namespace
}  // namespace fxopt
