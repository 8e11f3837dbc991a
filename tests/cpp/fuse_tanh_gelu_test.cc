#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/fuse_tanh_gelu.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseTanhGelu-test";
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

class FuseTanhGeluTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(FuseTanhGelu(), program, edits, ops, kSig, reverse);
  }
  // 0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), spelled as `dialect` does.
  Node* written_out(Node* x, bool aten, const std::string& p) {
    const char* mul = aten ? "aten.mul.Tensor" : "_operator.mul";
    const char* add = aten ? "aten.add.Tensor" : "_operator.add";
    Node* half = b.call(p + "mul", mul, aten ? Args{x, 0.5} : Args{0.5, x});
    Node* cube = b.call(p + "pow_1", aten ? "aten.pow.Tensor_Scalar" : "torch.pow", {x, 3.0});
    Node* scaled = b.call(p + "mul_1", mul, {0.044715, cube});
    Node* sum = b.call(p + "add", add, aten ? Args{scaled, x} : Args{x, scaled});
    Node* inner = b.call(p + "mul_2", mul, {kSqrt2OverPi, sum});
    Node* tanh = b.call(p + "tanh", aten ? "aten.tanh.default" : "torch.tanh", {inner});
    Node* one_plus = b.call(p + "add_1", add, aten ? Args{tanh, 1.0} : Args{1.0, tanh});
    return b.call(p + "mul_3", mul, aten ? Args{one_plus, half} : Args{half, one_plus});
  }

  TensorInfo x_ = input({2, 3});
};

TEST_F(FuseTanhGeluTest, WrittenOutGeluBecomesOneCallInEachDialect) {
  Node* x = b.input("x");
  Node* torch_form = written_out(x, /*aten=*/false, "t_");
  Node* aten_form = written_out(torch_form, /*aten=*/true, "a_");
  b.output(aten_form);
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 2u);
  EXPECT_TRUE(forward.skipped.empty());
  std::vector<Node*> torch_gelu =
      program.graph.find(NodeKind::CallFunction, Symbol::intern("torch._C._nn.gelu"));
  std::vector<Node*> aten_gelu =
      program.graph.find(NodeKind::CallFunction, Symbol::intern("aten.gelu.default"));
  ASSERT_EQ(torch_gelu.size(), 1u);
  ASSERT_EQ(aten_gelu.size(), 1u);
  EXPECT_EQ(torch_gelu[0]->args(), Args{x});
  EXPECT_EQ(*torch_gelu[0]->kwargs().find("approximate"), Arg("tanh"));
  EXPECT_EQ(aten_gelu[0]->args(), Args{torch_gelu[0]});
  EXPECT_EQ(program.graph.size(), 4u);  // x, two gelu calls, output
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(FuseTanhGeluTest, AnotherFormulaOrASharedValueStays) {
  Node* x = b.input("x");
  Node* plain = b.call("tanh", "torch.tanh", {x});  // BERT's pooler: a tanh on its own
  Node* gelu = written_out(x, /*aten=*/false, "g_");
  Node* inner = gelu->args()[1].node()->args()[1].node()->args()[0].node();  // sqrt(2/pi) * (...)
  b.output(Tuple{{plain, gelu, inner}});                                     // read twice
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_TRUE(forward.changed.empty());
  ASSERT_EQ(forward.skipped.size(), 2u);
  EXPECT_EQ(forward.skipped[0].reason, "its input is not sqrt(2 / pi) * (x + 0.044715 * x ** 3)");
  EXPECT_EQ(forward.skipped[1].reason, "a value inside it has other readers");
  EXPECT_EQ(structure(), graph_before);
}

// x.mul_(0.5) writes x before the other terms read it: not the formula on x's value.
TEST_F(FuseTanhGeluTest, AnInPlaceStepStays) {
  Node* x = b.input("x");
  Node* gelu = written_out(x, /*aten=*/false, "g_");
  Node* half = gelu->args()[0].node();
  program.graph.set_target(half, NodeKind::CallMethod, Symbol::intern("mul_"));
  program.graph.set_inputs(half, {x, 0.5}, {});
  b.output(gelu);
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_TRUE(forward.changed.empty());
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason, "a step of it writes its input in place");
  EXPECT_EQ(structure(), graph_before);
}

}  // namespace
}  // namespace fxopt
