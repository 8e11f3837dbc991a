#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/fuse_linear_activation_onednn.h"

namespace fxopt {
namespace {

const std::string kSig = "FuseLinearActivationOneDnn-test";
const std::string kOneDnn = "fxopt.runtime.onednn_linear.linear_pointwise";

class FuseLinearActivationOneDnnTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false, std::vector<std::string> dtypes = {"float32"}) {
    return run_pass(FuseLinearActivationOneDnn(std::move(dtypes)), program, edits, ops, kSig,
                    reverse);
  }
  void activation_module(const std::string& path, const std::string& type, Dict attributes = {}) {
    program.modules[path] = ModuleInfo{
        Symbol::intern("torch.nn.modules.activation." + type), std::move(attributes), {}};
    program.taken_paths.insert(path);
  }

  TensorInfo x_ = input({2, 3, 4});
};

TEST_F(FuseLinearActivationOneDnnTest, ModuleLinearAndGeluBecomeOneCall) {
  linear_module("fc", 4, 6, true);
  activation_module("act", "GELU", Dict{{{"approximate", "none"}}});
  ModuleInfo fc_before = program.modules.at("fc");
  Node* x = b.input("x");
  Node* fc = b.module("fc", "fc", {x});
  b.output(Tuple{{b.module("act", "act", {fc})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"linear_pointwise"}));
  EXPECT_TRUE(forward.skipped.empty());
  Node* fused = program.graph.find_by_name("linear_pointwise");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->target().str(), kOneDnn);
  ASSERT_EQ(fused->args().size(), 6u);
  EXPECT_EQ(fused->args()[0], Arg(x));
  // The module's own tensors, read as they are: nothing is copied or reordered.
  EXPECT_TRUE(fused->args()[1].node()->is(NodeKind::GetAttr, Symbol::intern("fc.weight")));
  EXPECT_TRUE(fused->args()[2].node()->is(NodeKind::GetAttr, Symbol::intern("fc.bias")));
  EXPECT_EQ(fused->args()[3], Arg("gelu"));
  EXPECT_EQ(fused->args()[4], Arg(List{}));
  EXPECT_EQ(fused->args()[5], Arg("none"));
  EXPECT_EQ(program.graph.size(), 5u);  // x, two get_attr, the call, output
  EXPECT_EQ(program.modules.at("fc").tensors, fc_before.tensors);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"act"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(FuseLinearActivationOneDnnTest, EveryDialectAndPostOp) {
  attribute("a.weight", {6, 4});
  attribute("a.bias", {6});
  attribute("b.weight", {5, 6});
  attribute("c.weight", {3, 5});
  attribute("c.bias", {3});
  Node* x = b.input("x");
  Node* aw = b.attr("a_weight", "a.weight");
  Node* ab = b.attr("a_bias", "a.bias");
  Node* a = b.call("linear", "aten.linear.default", {x, aw, ab});
  Node* gelu = b.call("gelu", "aten.gelu.default", {a}, Dict{{{"approximate", "tanh"}}});
  Node* bw = b.attr("b_weight", "b.weight");
  Node* lb = b.call("linear_1", "aten.linear.default", {gelu, bw});
  Node* relu = b.call("relu", "aten.relu.default", {lb});
  Node* cw = b.attr("c_weight", "c.weight");
  Node* cb = b.attr("c_bias", "c.bias");
  Node* lc = b.call("linear_2", "torch._C._nn.linear", {relu, cw}, Dict{{{"bias", cb}}});
  b.output(Tuple{{b.call("silu", "torch.nn.functional.silu", {lc})}});
  auto before = run({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 3u);
  EXPECT_EQ(count(NodeKind::CallFunction, kOneDnn), 3u);
  EXPECT_EQ(program.graph.size(), 10u);  // x, five get_attr, three calls, output
  std::vector<Args> post_ops;
  for (Node* n : program.graph.find(NodeKind::CallFunction, Symbol::intern(kOneDnn)))
    post_ops.push_back(Args(n->args().begin() + 2, n->args().end()));
  EXPECT_EQ(post_ops[0], (Args{ab, "gelu", List{}, "tanh"}));
  EXPECT_EQ(post_ops[1], (Args{None{}, "relu", List{}, None{}}));
  EXPECT_EQ(post_ops[2], (Args{cb, "swish", List{}, None{}}));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(FuseLinearActivationOneDnnTest, ALinearWithOtherReadersFusesAlone) {
  linear_module("fc", 4, 4, true);
  activation_module("act", "ReLU", Dict{{{"inplace", false}}});
  activation_module("mish", "Mish");
  linear_module("fc2", 4, 4, false);
  Node* x = b.input("x");
  Node* fc = b.module("fc", "fc", {x});
  Node* act = b.module("act", "act", {fc});
  Node* residual = b.call("add", "_operator.add", {act, fc});
  Node* fc2 = b.module("fc2", "fc2", {residual});
  Node* mish = b.module("mish", "mish", {fc2});
  b.output(Tuple{{mish}});
  auto graph_before = structure();

  apply();
  std::vector<Node*> fused = program.graph.find(NodeKind::CallFunction, Symbol::intern(kOneDnn));
  ASSERT_EQ(fused.size(), 2u);
  EXPECT_EQ(fused[0]->args()[3], Arg("none"));  // fc is read by the ReLU and the residual add
  EXPECT_EQ(act->args()[0], Arg(fused[0]));
  EXPECT_EQ(fused[1]->args()[3], Arg("none"));  // oneDNN has no Mish post-op
  EXPECT_EQ(fused[1]->args()[2], Arg(None{}));
  EXPECT_EQ(mish->args()[0], Arg(fused[1]));

  apply(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(FuseLinearActivationOneDnnTest, SkipsWhatOneDnnCannotRunHere) {
  linear_module("low", 4, 4, true, "bfloat16");
  attribute("gpu.weight", {4, 4});
  program.attributes.at("gpu.weight").device = "cuda:0";
  Node* x = b.input("x");
  Node* low = b.module("low", "low", {x});
  Node* w = b.attr("gpu_weight", "gpu.weight");
  Node* gpu = b.call("linear", "aten.linear.default", {x, w});
  b.output(Tuple{{low, gpu}});
  auto graph_before = structure();

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason,
            "its weight is bfloat16; oneDNN's fused linear runs float32 here");
  EXPECT_EQ(result.skipped[1].reason, "its weight is on cuda:0; oneDNN's fused linear is CPU-only");

  result = apply(false, {});
  ASSERT_EQ(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason,
            "oneDNN's fused linear is not available: this torch lacks torch.ops.mkldnn's "
            "pointwise ops, or oneDNN is disabled");
  EXPECT_EQ(structure(), graph_before);

  result = apply(false, {"float32", "bfloat16"});
  EXPECT_EQ(result.changed, (std::vector<std::string>{"linear_pointwise"}));
}

TEST_F(FuseLinearActivationOneDnnTest, OptionsNameDtypes) {
  EXPECT_NO_THROW(FuseLinearActivationOneDnn::from_options(Dict{{{"dtypes", List{{"float32"}}}}}));
  EXPECT_THROW(FuseLinearActivationOneDnn::from_options(Dict{}), std::invalid_argument);
  EXPECT_THROW(FuseLinearActivationOneDnn::from_options(Dict{{{"dtypes", List{{1}}}}}),
               std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
