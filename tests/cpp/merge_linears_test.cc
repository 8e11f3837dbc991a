#include <gtest/gtest.h>

#include <map>

#include "linear_fixtures.h"
#include "passes/merge_linears.h"

namespace fxopt {
namespace {

const std::string kSig = "MergeLinears-test";

class MergeLinearsTest : public ::testing::Test, protected testing::LinearFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(pass_, program, edits, ops, kSig, reverse);
  }
  // Values of a module's or attribute's tensor.
  const std::vector<double>& module_values(const std::string& path, const std::string& name) {
    return ops.values(*program.modules.at(path).tensor(name));
  }

  MergeLinears pass_;
  TensorInfo x_ = input({2, 3, 4});
};

TEST_F(MergeLinearsTest, ModuleLinearsMergeAndReverseExactly) {
  linear_module("attn.q", 4, 5, true);
  linear_module("attn.k", 4, 5, true);
  linear_module("attn.v", 4, 3, false);
  ModuleInfo v_before = program.modules.at("attn.v");
  std::vector<double> q_weight = module_values("attn.q", "weight");
  Node* x = b.input("x");
  Node* q = b.module("attn_q", "attn.q", {x});
  Node* k = b.module("attn_k", "attn.k", {x});
  Node* v = b.module("attn_v", "attn.v", {x});
  b.output(Tuple{{q, k, v}});
  auto before = run({{"x", x_}});

  PassResult forward = apply();
  EXPECT_EQ(forward.changed,
            (std::vector<std::string>{"attn_q_k_v_merged", "attn_q", "attn_k", "attn_v"}));
  EXPECT_TRUE(forward.skipped.empty());
  EXPECT_EQ(program.graph.size(), 6u);
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.narrow"), 3u);
  EXPECT_FALSE(program.modules.contains("attn.q"));
  const ModuleInfo& merged = program.modules.at("attn.q_k_v_merged");
  EXPECT_EQ(*merged.attribute("out_features"), Arg(13));
  EXPECT_EQ(merged.tensor("weight")->shape, (std::vector<int64_t>{13, 4}));
  EXPECT_TRUE(merged.tensor("weight")->is_parameter);
  EXPECT_TRUE(merged.tensor("weight")->requires_grad);
  const std::vector<double>& bias = ops.values(*merged.tensor("bias"));
  EXPECT_EQ(std::vector<double>(bias.end() - 3, bias.end()), std::vector<double>(3, 0.0));
  EXPECT_EQ(v->args(), (Args{program.graph.find_by_name("attn_q_k_v_merged"), -1, 10, 3}));
  for (Node* n : {q, k, v}) EXPECT_TRUE(is_marked(*n, kSig));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"attn_q", "attn_k", "attn_v"}));
  EXPECT_FALSE(program.modules.contains("attn.q_k_v_merged"));
  EXPECT_EQ(program.graph.size(), 5u);
  EXPECT_TRUE(q->is(NodeKind::CallModule, Symbol::intern("attn.q")));
  EXPECT_EQ(q->args(), Args{x});
  EXPECT_EQ(module_values("attn.q", "weight"), q_weight);
  const ModuleInfo& v_after = program.modules.at("attn.v");
  EXPECT_FALSE(v_after.tensor("bias")->present());  // None again, not zeros
  EXPECT_EQ(v_after.attributes, v_before.attributes);
  EXPECT_EQ(v_after.tensor("weight")->shape, v_before.tensor("weight")->shape);
  EXPECT_TRUE(v_after.tensor("weight")->is_parameter);
  for (Node* n : program.graph) EXPECT_TRUE(n->meta().items.empty()) << n->name();
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(MergeLinearsTest, NewModulesAreCopiesRegisteredBeforeTheOriginalsGo) {
  linear_module("q", 4, 2, true);
  linear_module("k", 4, 2, true);
  Node* x = b.input("x");
  b.output(Tuple{{b.module("q", "q", {x}), b.module("k", "k", {x})}});
  apply();
  // Root-level modules: the merged one is root-level too, and its template still exists when
  // the bridge copies it.
  ASSERT_GE(edits.size(), 3u);
  EXPECT_EQ(edits[0].kind, Edit::Kind::SetModule);
  EXPECT_EQ(edits[0].name, "q_k_merged");
  EXPECT_EQ(edits[0].like, "q");
  std::vector<std::string> removed;
  for (const Edit& e : edits)
    if (e.kind == Edit::Kind::RemoveModule) removed.push_back(e.name);
  EXPECT_EQ(removed, (std::vector<std::string>{"q", "k"}));
}

TEST_F(MergeLinearsTest, AtenLinearsWithGetAttrWeights) {
  attribute("enc.q.weight", {5, 4});
  attribute("enc.q.bias", {5});
  attribute("enc.k.weight", {2, 4});
  std::vector<double> k_weight = ops.values(program.attributes.at("enc.k.weight"));
  Node* x = b.input("x");
  Node* qw = b.attr("enc_q_weight", "enc.q.weight");
  Node* qb = b.attr("enc_q_bias", "enc.q.bias");
  Node* kw = b.attr("enc_k_weight", "enc.k.weight");
  Node* q = b.call("linear", "aten.linear.default", {x, qw, qb});
  Node* k = b.call("linear_1", "aten.linear.default", {x, kw});
  b.output(Tuple{{q, k}});
  auto before = run({{"x", x_}});

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 3u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.slice.Tensor"), 2u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.linear.default"), 1u);
  EXPECT_EQ(program.graph.size(), 7u);  // x, 2 new get_attr, merged, 2 slices, output
  EXPECT_FALSE(program.attributes.contains("enc.q.weight"));
  EXPECT_EQ(program.attributes.at("enc.q_k_merged_weight").shape, (std::vector<int64_t>{7, 4}));
  EXPECT_EQ(program.attributes.at("enc.q_k_merged_bias").shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(k->args(), (Args{program.graph.find_by_name("enc_q_k_merged"), -1, 5, 7}));
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(program.graph.size(), 7u);
  EXPECT_FALSE(program.attributes.contains("enc.q_k_merged_weight"));
  EXPECT_EQ(ops.values(program.attributes.at("enc.k.weight")), k_weight);
  EXPECT_FALSE(program.attributes.contains("enc.k.bias"));
  // The get_attr nodes come back under their names; k gets no bias operand.
  EXPECT_EQ(q->args().size(), 3u);
  EXPECT_EQ(q->args()[1].node()->name(), "enc_q_weight");
  EXPECT_EQ(q->args()[2].node()->name(), "enc_q_bias");
  EXPECT_EQ(k->args().size(), 2u);
  EXPECT_EQ(k->args()[1].node()->name(), "enc_k_weight");
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(MergeLinearsTest, FunctionalLinearKeepsItsKeywordSpelling) {
  attribute("w1", {3, 4});
  attribute("b1", {3});
  attribute("w2", {3, 4});
  Node* x = b.input("x");
  Node* w1 = b.attr("w1", "w1");
  Node* b1 = b.attr("b1", "b1");
  Node* w2 = b.attr("w2", "w2");
  Node* l1 = b.call("linear", "torch._C._nn.linear", {x, w1}, Dict{{{"bias", b1}}});
  Node* l2 = b.call("linear_1", "torch._C._nn.linear", {x, w2});
  b.output(Tuple{{l1, l2}});
  auto before = run({{"x", x_}});

  apply();
  EXPECT_TRUE(program.attributes.contains("w1_w2_merged_weight"));  // root-level names
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.narrow"), 2u);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(l1->args().size(), 2u);
  ASSERT_NE(l1->kwargs().find("bias"), nullptr);
  EXPECT_EQ(l1->kwargs().find("bias")->node()->name(), "b1");
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

// ALBERT: one layer's tensors serve every layer. q and k are read at both "layers" (inputs x
// and y): one merged weight serves both sites; reverse puts the shared reads back in place.
TEST_F(MergeLinearsTest, SharedWeightsMergeOnceForEveryCallSite) {
  attribute("layer.q.weight", {5, 4});
  attribute("layer.q.bias", {5});
  attribute("layer.k.weight", {2, 4});
  Node* qw = b.attr("layer_q_weight", "layer.q.weight");
  Node* qb = b.attr("layer_q_bias", "layer.q.bias");
  Node* kw = b.attr("layer_k_weight", "layer.k.weight");
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* q0 = b.call("linear", "aten.linear.default", {x, qw, qb});
  Node* k0 = b.call("linear_1", "aten.linear.default", {x, kw});
  Node* q1 = b.call("linear_2", "aten.linear.default", {y, qw, qb});
  Node* k1 = b.call("linear_3", "aten.linear.default", {y, kw});
  b.output(Tuple{{q0, k0, q1, k1}});
  auto order = [&] {
    std::vector<std::string> names;
    for (Node* n : program.graph) names.push_back(n->name());
    return names;
  };
  std::vector<std::string> order_before = order();
  std::map<std::string, TensorInfo> inputs{{"x", x_}, {"y", input({2, 3, 4})}};
  auto before = run(inputs);

  PassResult forward = apply();
  EXPECT_EQ(forward.changed.size(), 6u);  // two merged calls, four slices
  EXPECT_TRUE(forward.skipped.empty());
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.linear.default"), 2u);
  EXPECT_EQ(count(NodeKind::GetAttr, "layer.q_k_merged_weight"), 1u);  // one read serves both
  EXPECT_FALSE(program.attributes.contains("layer.q.weight"));
  EXPECT_FALSE(program.attributes.contains("layer.k.weight"));
  EXPECT_EQ(program.graph.size(), 11u);  // 3 reads become 2; 4 Linears, 2 merged calls more
  EXPECT_LE(max_diff(before, run(inputs)), 1e-12);

  apply(/*reverse=*/true);
  EXPECT_EQ(order(), order_before);
  EXPECT_EQ(q1->args()[1].node(), q0->args()[1].node());  // still one read of the weight
  EXPECT_FALSE(program.attributes.contains("layer.q_k_merged_weight"));
  EXPECT_EQ(max_diff(before, run(inputs)), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

// A shared weight whose other sites have no partner at their input stays as it is.
TEST_F(MergeLinearsTest, SharedWeightsWithoutPartnersAtEverySiteStayAlone) {
  attribute("q.weight", {5, 4});
  attribute("k.weight", {2, 4});
  Node* qw = b.attr("q_weight", "q.weight");
  Node* kw = b.attr("k_weight", "k.weight");
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* q0 = b.call("linear", "aten.linear.default", {x, qw});
  Node* k0 = b.call("linear_1", "aten.linear.default", {x, kw});
  Node* q1 = b.call("linear_2", "aten.linear.default", {y, qw});
  b.output(Tuple{{q0, k0, q1}});

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  std::map<std::string, std::string> skipped;
  for (const Skip& s : result.skipped) skipped[s.node] = s.reason;
  EXPECT_NE(skipped["linear"].find("shared by 2 Linears"), std::string::npos);
  EXPECT_NE(skipped["linear_1"].find("no other Linear"), std::string::npos);
}

// Two modules holding one weight tensor (a tie) hold one again after reverse.
TEST_F(MergeLinearsTest, TiedWeightsComeBackAsOneTensor) {
  linear_module("a", 4, 3, true);
  linear_module("b", 4, 3, true);
  program.modules.at("b").tensors["weight"] = *program.modules.at("a").tensor("weight");
  Node* x = b.input("x");
  Node* a = b.module("a", "a", {x});
  Node* bb = b.module("b", "b", {x});
  b.output(Tuple{{a, bb}});
  auto before = run({{"x", x_}});

  apply();
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.narrow"), 2u);
  apply(/*reverse=*/true);
  const TensorInfo* a_weight = program.modules.at("a").tensor("weight");
  EXPECT_EQ(program.modules.at("b").tensor("weight")->handle, a_weight->handle);
  EXPECT_NE(program.modules.at("b").tensor("bias")->handle,
            program.modules.at("a").tensor("bias")->handle);
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
}

TEST_F(MergeLinearsTest, GroupsOnlyMatchingLinearsAndSaysWhyNot) {
  linear_module("a", 4, 2, true);
  linear_module("half", 4, 2, true, "float16");
  linear_module("b", 4, 2, false);
  linear_module("shared", 4, 2, true);
  linear_module("alone", 4, 2, true);
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* a = b.module("a", "a", {x});
  Node* half = b.module("half", "half", {x});
  Node* s1 = b.module("shared", "shared", {x});
  Node* bb = b.module("b", "b", {x});
  Node* s2 = b.module("shared_1", "shared", {x});
  Node* alone = b.module("alone", "alone", {y});
  b.output(Tuple{{a, half, s1, bb, s2, alone}});

  PassResult result = apply();
  EXPECT_TRUE(program.modules.contains("a_b_merged"));
  EXPECT_TRUE(program.modules.contains("half"));
  std::map<std::string, std::string> skipped;
  for (const Skip& s : result.skipped) skipped[s.node] = s.reason;
  EXPECT_NE(skipped["half"].find("no other Linear"), std::string::npos);
  EXPECT_NE(skipped["shared"].find("shared by 2 Linears"), std::string::npos);
  EXPECT_NE(skipped["shared_1"].find("shared by 2 Linears"), std::string::npos);
  EXPECT_NE(skipped["alone"].find("no other Linear"), std::string::npos);
  EXPECT_EQ(skipped.size(), 4u);
}

TEST_F(MergeLinearsTest, NewPathsNeverCollide) {
  linear_module("q", 4, 2, true);
  linear_module("k", 4, 2, true);
  program.taken_paths.insert("q_k_merged");
  Node* x = b.input("x");
  b.output(Tuple{{b.module("q", "q", {x}), b.module("k", "k", {x})}});
  apply();
  EXPECT_TRUE(program.modules.contains("q_k_merged_1"));
}

TEST_F(MergeLinearsTest, ReverseFailsLoudlyWithoutTheMergedLinear) {
  linear_module("q", 4, 2, true);
  linear_module("k", 4, 2, true);
  Node* x = b.input("x");
  Node* q = b.module("q", "q", {x});
  b.output(Tuple{{q, b.module("k", "k", {x})}});
  apply();
  // Something else made q read x directly: reverse cannot know its weights any more.
  Rewriter(program, edits).set_inputs(q, {x, -1, 0, 2}, {});
  EXPECT_THROW(apply(/*reverse=*/true), PassError);
}

}  // namespace
}  // namespace fxopt
