#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/change_activation.h"

namespace fxopt {
namespace {

const std::string kSig = "ChangeActivation-test";

class ChangeActivationTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(const std::string& source, const std::string& target, bool reverse = false) {
    return run_pass(ChangeActivation(source, target), program, edits, ops, kSig, reverse);
  }
  void activation_module(const std::string& path, const std::string& type, Dict attributes = {}) {
    program.modules[path] = ModuleInfo{
        Symbol::intern("torch.nn.modules.activation." + type), std::move(attributes), {}};
    program.taken_paths.insert(path);
  }

  TensorInfo x_ = input({2, 3});
};

TEST_F(ChangeActivationTest, GeluBecomesTanhInEveryDialectAndBack) {
  activation_module("act", "GELU", Dict{{{"approximate", "none"}}});
  activation_module("approx", "GELU", Dict{{{"approximate", "tanh"}}});
  Node* x = b.input("x");
  Node* module = b.module("act", "act", {x});
  Node* function = b.call("gelu", "torch._C._nn.gelu", {module});
  Node* aten = b.call("gelu_1", "aten.gelu.default", {function}, Dict{{{"approximate", "none"}}});
  Node* approx = b.module("approx", "approx", {aten});
  b.output(approx);
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply("gelu", "gelu_tanh");
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"act", "gelu", "gelu_1"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason, "computes gelu_tanh, not gelu");
  // The module call becomes the torch function; ATen stays ATen.
  EXPECT_TRUE(module->is(NodeKind::CallFunction, Symbol::intern("torch._C._nn.gelu")));
  EXPECT_EQ(module->args(), Args{x});
  EXPECT_EQ(*module->kwargs().find("approximate"), Arg("tanh"));
  EXPECT_TRUE(aten->is(NodeKind::CallFunction, Symbol::intern("aten.gelu.default")));
  EXPECT_EQ(*aten->kwargs().find("approximate"), Arg("tanh"));
  double moved = max_diff(before, run({{"x", x_}}));
  EXPECT_GT(moved, 0.0);
  EXPECT_LT(moved, 1e-2);

  apply("gelu", "gelu_tanh", /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  for (Node* n : {module, function, aten}) EXPECT_TRUE(n->meta().items.empty());
}

TEST_F(ChangeActivationTest, ReluBecomesSiluExceptInPlaceOnSharedValues) {
  activation_module("relu", "ReLU", Dict{{{"inplace", false}}});
  activation_module("relu_inplace", "ReLU", Dict{{{"inplace", true}}});
  Node* x = b.input("x");
  Node* m = b.module("relu", "relu", {x});
  Node* method = b.method("relu_1", "relu", {m});
  Node* f = b.call("relu_2", "torch.nn.functional.relu", {method}, Dict{{{"inplace", false}}});
  Node* shared = b.module("relu_inplace", "relu_inplace", {f});
  Node* sum = b.call("add", "aten.add.Tensor", {shared, f});
  b.output(sum);
  auto graph_before = structure();

  PassResult forward = apply("relu", "silu");
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"relu", "relu_1", "relu_2"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason, "works in place on a value other nodes read");
  EXPECT_TRUE(method->is(NodeKind::CallFunction, Symbol::intern("torch.nn.functional.silu")));
  EXPECT_TRUE(f->kwargs().items.empty());  // F.silu gets only its input

  apply("relu", "silu", /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(ChangeActivationTest, RejectsUnknownNames) {
  EXPECT_THROW(ChangeActivation("swish", "relu"), std::invalid_argument);
  EXPECT_THROW(ChangeActivation("relu", "relu"), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
