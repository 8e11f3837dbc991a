#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/move_activation_before_reshape.h"

namespace fxopt {
namespace {

const std::string kSig = "MoveActivationBeforeReshape-test";

class MoveActivationBeforeReshapeTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(MoveActivationBeforeReshape(), program, edits, ops, kSig, reverse);
  }
  size_t count(std::string_view target) const {
    size_t n = 0;
    for (const Node* node : program.graph) n += node->target().str() == target;
    return n;
  }
};

// GPT-2's MLP in a Dynamo graph: the product viewed back to [batch, seq, features], then GELU;
// an ATen graph's functional form next to a method form with a module activation.
TEST_F(MoveActivationBeforeReshapeTest, ActivationsAfterAViewOfALinearMoveBeforeIt) {
  attribute("w", {8, 4});
  linear_module("fc", 4, 8, true);
  Node* x = b.input("x");
  Node* product = b.call("linear", "aten.linear.default", {x, b.attr("w", "w")});
  Node* viewed = b.call("view", "aten.view.default", {product, List{{2, 3, 8}}});
  Node* gelu = b.call("gelu", "aten.gelu.default", {viewed});
  Node* fc = b.module("fc", "fc", {x});
  Node* reshaped = b.method("reshape", "reshape", {fc, List{{6, 8}}});
  Node* relu = b.module("act", "act", {reshaped});
  program.modules["act"] = ModuleInfo{Symbol::intern("torch.nn.modules.activation.ReLU"), {}};
  b.output(Tuple{{gelu, relu}});
  TensorInfo x_value = input({6, 4});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 2u);
  EXPECT_TRUE(forward.skipped.empty());
  // Each activation now reads its Linear, and the reshape reads the activation.
  ASSERT_EQ(viewed->args()[0].node()->target().str(), "aten.gelu.default");
  EXPECT_EQ(viewed->args()[0].node()->args()[0], Arg(product));
  ASSERT_EQ(reshaped->args()[0].node()->target().str(), "torch.relu");
  EXPECT_EQ(reshaped->args()[0].node()->args()[0], Arg(fc));
  EXPECT_EQ(program.graph.last()->args()[0], Arg(Tuple{{viewed, reshaped}}));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);  // the same values, bit for bit
  EXPECT_TRUE(program.graph.lint().empty());

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(MoveActivationBeforeReshapeTest, OtherReadersNonLinearsAndInPlaceStay) {
  attribute("w", {8, 4});
  Node* x = b.input("x");
  Node* product = b.call("linear", "aten.linear.default", {x, b.attr("w", "w")});
  Node* shared = b.call("view", "aten.view.default", {product, List{{2, 3, 8}}});
  Node* first = b.call("gelu", "aten.gelu.default", {shared});
  Node* not_linear = b.call("view_1", "aten.view.default", {x, List{{2, 3, 4}}});
  Node* second = b.call("relu", "aten.relu.default", {not_linear});
  Node* plain = b.call("relu_1", "aten.relu.default", {x});
  b.output(Tuple{{first, shared, second, plain}});
  auto graph_before = structure();

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 3u);
  EXPECT_EQ(result.skipped[0].reason, "the reshape has other readers");
  EXPECT_EQ(result.skipped[1].reason, "the reshape's input is no Linear");
  EXPECT_EQ(result.skipped[2].reason, "its input is no reshape");
  EXPECT_EQ(structure(), graph_before);
}

}  // namespace
}  // namespace fxopt
