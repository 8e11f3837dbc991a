#include <gtest/gtest.h>

#include <algorithm>

#include "norm_fixtures.h"
#include "passes/merge_linears.h"
#include "passes/recognize_linears.h"

namespace fxopt {
namespace {

const std::string kSig = "RecognizeLinears-test";

class RecognizeLinearsTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(RecognizeLinears(), program, edits, ops, kSig, reverse);
  }
  // The graph's nodes, sorted: reverse re-reads a weight through a get_attr placed before its
  // reader, not at the top of the graph where the original was.
  std::vector<std::string> sorted_structure() const {
    std::vector<std::string> s = structure();
    std::sort(s.begin(), s.end());
    return s;
  }
  void shape(Node* node, std::vector<int64_t> sizes) {
    program.graph.set_value_info(node, "float32", std::move(sizes));
  }

  // GPT-2's Conv1D as torch.export spells it: view(x, [-1, 4]) -> addmm -> view(..., 6).
  struct Conv1D {
    Node *x, *weight, *bias, *flatten, *addmm, *unflatten;
  };
  Conv1D conv1d(Arg unflatten_sizes) {
    attribute("h.c_attn.weight", {4, 6});
    attribute("h.c_attn.bias", {6});
    Conv1D c;
    c.weight = b.attr("h_c_attn_weight", "h.c_attn.weight");
    c.bias = b.attr("h_c_attn_bias", "h.c_attn.bias");
    c.x = b.input("x");
    c.flatten = b.call("view", "aten.view.default", {c.x, List{{-1, 4}}});
    c.addmm = b.call("addmm", "aten.addmm.default", {c.bias, c.flatten, c.weight});
    c.unflatten = b.call("view_1", "aten.view.default", {c.addmm, std::move(unflatten_sizes)});
    b.output(Tuple{{c.unflatten}});
    return c;
  }

  TensorInfo x_ = input({2, 3, 4});
};

TEST_F(RecognizeLinearsTest, Conv1DBecomesALinearOnTheUnflattenedInput) {
  Conv1D c = conv1d(List{{2, 3, 6}});
  shape(c.x, {2, 3, 4});
  shape(c.flatten, {6, 4});
  shape(c.unflatten, {2, 3, 6});
  TensorInfo stored = program.attributes.at("h.c_attn.weight");
  auto before = run({{"x", x_}});
  auto graph_before = sorted_structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"linear"}));
  EXPECT_TRUE(forward.skipped.empty());
  Node* linear = program.graph.find_by_name("linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_TRUE(linear->is(NodeKind::CallFunction, Symbol::intern("aten.linear.default")));
  // Both views and the addmm are gone; the Linear reads x itself and the transposed weight.
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.view.default"), 0u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.addmm.default"), 0u);
  EXPECT_EQ(program.graph.size(), 5u);  // x, bias, weight_t, linear, output
  ASSERT_EQ(linear->args().size(), 3u);
  EXPECT_EQ(linear->args()[0], Arg(c.x));
  EXPECT_EQ(linear->args()[2], Arg(c.bias));
  EXPECT_EQ(linear->args()[1].node()->target().str(), "h.c_attn.weight_t");
  const TensorInfo& transposed = program.attributes.at("h.c_attn.weight_t");
  EXPECT_EQ(transposed.shape, (std::vector<int64_t>{6, 4}));
  EXPECT_TRUE(transposed.is_parameter);
  EXPECT_EQ(ops.values(transposed), ops.values(ops.transpose(stored, 0, 1)));
  EXPECT_EQ(program.attributes.at("h.c_attn.weight"), stored);  // copy-on-write
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"view_1"}));
  EXPECT_EQ(sorted_structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("h.c_attn.weight_t"));
  EXPECT_EQ(max_diff(before, run({{"x", x_}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(RecognizeLinearsTest, ViewsStayUnlessTheShapesProveThem) {
  // Symbolic sizes (fx records -1) prove nothing about the leading dimensions.
  Conv1D c = conv1d(List{{2, 3, 6}});
  shape(c.x, {-1, -1, 4});
  shape(c.flatten, {-1, 4});
  shape(c.unflatten, {-1, -1, 6});
  auto before = run({{"x", x_}});

  apply();
  Node* linear = program.graph.find_by_name("linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->args()[0], Arg(c.flatten));
  EXPECT_EQ(c.unflatten->args()[0], Arg(linear));
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.view.default"), 2u);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
}

TEST_F(RecognizeLinearsTest, ViewsStayWhenTheUnflattenReordersLeadingSizes) {
  Conv1D c = conv1d(List{{3, 2, 6}});
  shape(c.x, {2, 3, 4});
  shape(c.flatten, {6, 4});
  shape(c.unflatten, {3, 2, 6});
  auto before = run({{"x", x_}});

  apply();
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.view.default"), 2u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.linear.default"), 1u);
  EXPECT_LE(max_diff(before, run({{"x", x_}})), 1e-12);
}

TEST_F(RecognizeLinearsTest, ReverseFindsTheSizesTheUnflattenRead) {
  // Dynamic export: the unflatten reads sizes computed elsewhere in the graph.
  attribute("h.c_attn.weight", {4, 6});
  attribute("h.c_attn.bias", {6});
  Node* w = b.attr("h_c_attn_weight", "h.c_attn.weight");
  Node* bias = b.attr("h_c_attn_bias", "h.c_attn.bias");
  Node* x = b.input("x");
  Node* mask = b.input("mask");
  Node* s0 = b.call("sym_size_int", "aten.sym_size.int", {mask, 0});
  Node* s1 = b.call("sym_size_int_1", "aten.sym_size.int", {mask, 1});
  Node* flatten = b.call("view", "aten.view.default", {x, List{{-1, 4}}});
  Node* addmm = b.call("addmm", "aten.addmm.default", {bias, flatten, w});
  Node* unflatten = b.call("view_1", "aten.view.default", {addmm, List{{s0, s1, 6}}});
  b.output(Tuple{{unflatten}});
  auto graph_before = sorted_structure();

  apply();
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.linear.default"), 1u);
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.view.default"), 2u);
  apply(/*reverse=*/true);
  EXPECT_EQ(sorted_structure(), graph_before);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(RecognizeLinearsTest, TransposedParameterPlusBiasNeedsNoNewTensor) {
  // x @ W.t() + b and b + x.mm(W.T) as symbolic_trace spells them; two of them read x, so
  // MergeLinears can merge them afterwards.
  attribute("W", {6, 4});
  attribute("V", {5, 4});
  attribute("b", {6});
  attribute("c", {5});
  Node* x = b.input("x");
  Node* w = b.attr("w", "W");
  Node* t = b.method("t", "t", {w});
  Node* mm = b.call("matmul", "_operator.matmul", {x, t});
  Node* bias = b.attr("b", "b");
  Node* add = b.call("add", "_operator.add", {mm, bias});
  Node* v = b.attr("v", "V");
  Node* vt = b.call("getattr_1", "getattr", {v, "T"});
  Node* c = b.attr("c", "c");
  Node* mm2 = b.call("mm", "torch.mm", {x, vt});
  Node* add2 = b.call("add_1", "torch.add", {c, mm2});
  b.output(Tuple{{add, add2}});
  TensorInfo x2 = input({3, 4});
  auto before = run({{"x", x2}});
  auto graph_before = sorted_structure();
  size_t attributes_before = program.attributes.size();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"linear", "linear_1"}));
  EXPECT_EQ(count(NodeKind::CallFunction, "torch._C._nn.linear"), 2u);
  EXPECT_EQ(program.graph.size(), 8u);  // x, w, b, v, c, two linears, output
  Node* linear = program.graph.find_by_name("linear");
  EXPECT_EQ(linear->args(), (Args{x, w, bias}));
  EXPECT_EQ(program.attributes.size(), attributes_before);  // W read as it is
  EXPECT_LE(max_diff(before, run({{"x", x2}})), 1e-12);

  PassResult merged = run_pass(MergeLinears(), program, edits, ops, "MergeLinears-test", false);
  EXPECT_EQ(merged.changed.size(), 3u);  // the merged Linear and its two members
  EXPECT_EQ(count(NodeKind::CallFunction, "torch.narrow"), 2u);
  EXPECT_LE(max_diff(before, run({{"x", x2}})), 1e-12);
  run_pass(MergeLinears(), program, edits, ops, "MergeLinears-test", true);

  apply(/*reverse=*/true);
  EXPECT_EQ(sorted_structure(), graph_before);
  EXPECT_EQ(max_diff(before, run({{"x", x2}})), 0.0);
}

TEST_F(RecognizeLinearsTest, ProductWithOtherReadersBecomesALinearWithoutBias) {
  attribute("Wt", {4, 6});
  attribute("b", {6});
  Node* x = b.input("x");
  Node* w = b.attr("wt", "Wt");
  Node* mm = b.call("mm", "aten.mm.default", {x, w});
  Node* bias = b.attr("b", "b");
  Node* add = b.call("add", "aten.add.Tensor", {mm, bias});
  b.output(Tuple{{add, mm}});
  TensorInfo x2 = input({3, 4});
  auto before = run({{"x", x2}});

  apply();
  Node* linear = program.graph.find_by_name("linear");
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->args().size(), 2u);  // no bias: the add stays
  EXPECT_EQ(add->args()[0], Arg(linear));
  EXPECT_LE(max_diff(before, run({{"x", x2}})), 1e-12);
}

TEST_F(RecognizeLinearsTest, TranspositionReadElsewhereStays) {
  attribute("W", {6, 4});
  Node* x = b.input("x");
  Node* w = b.attr("w", "W");
  Node* t = b.call("permute", "aten.permute.default", {w, List{{1, 0}}});
  Node* mm = b.call("mm", "aten.mm.default", {x, t});
  b.output(Tuple{{mm, t}});
  auto graph_before = sorted_structure();

  apply();
  EXPECT_EQ(count(NodeKind::CallFunction, "aten.permute.default"), 1u);
  EXPECT_EQ(program.graph.find_by_name("linear")->args(), (Args{x, w}));
  apply(/*reverse=*/true);
  EXPECT_EQ(sorted_structure(), graph_before);
}

TEST_F(RecognizeLinearsTest, SkipsWhatIsNoLinear) {
  attribute("Wt", {4, 6});
  attribute("b", {6});
  attribute("b2", {3, 6});
  attribute("W3", {2, 4, 6});
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* wt = b.attr("wt", "Wt");
  Node* bias = b.attr("b", "b");
  Node* b2 = b.attr("b2", "b2");
  Node* w3 = b.attr("w3", "W3");
  Node* scores = b.call("matmul", "aten.matmul.default", {x, y});  // attention, no weight
  Node* scaled = b.call("addmm", "aten.addmm.default", {bias, x, wt}, Dict{{{"beta", 0.5}}});
  Node* full_bias = b.call("addmm_1", "aten.addmm.default", {b2, x, wt});
  Node* batched = b.call("matmul_1", "aten.matmul.default", {x, w3});
  b.output(Tuple{{scores, scaled, full_bias, batched}});
  auto graph_before = structure();

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 4u);
  EXPECT_EQ(result.skipped[0].reason,
            "its second operand is not a stored weight (a get_attr tensor, or one transposed)");
  EXPECT_EQ(result.skipped[1].reason,
            "its operands are not (bias, input, weight) with beta = alpha = 1");
  EXPECT_EQ(result.skipped[2].reason,
            "its bias is not a stored 1-D tensor of out_features elements like the weight");
  EXPECT_EQ(result.skipped[3].reason, "its weight is not a matrix");
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(RecognizeLinearsTest, ReverseRefusesALinearAnotherPassChanged) {
  attribute("Wt", {4, 6});
  Node* x = b.input("x");
  Node* w = b.attr("wt", "Wt");
  b.output(Tuple{{b.call("mm", "aten.mm.default", {x, w})}});
  apply();
  Node* linear = program.graph.find_by_name("linear");
  Rewriter rewriter(program, edits);
  Node* other = rewriter.read_attribute(linear, "Wt");
  rewriter.set_inputs(linear, {x, other}, {});
  try {
    apply(/*reverse=*/true);
    FAIL() << "reverse should refuse";
  } catch (const PassError& e) {
    EXPECT_NE(std::string(e.what()).find("its weight no longer reads 'Wt_t'"), std::string::npos);
  }
}

}  // namespace
}  // namespace fxopt

namespace fxopt {
namespace {

TEST(RecognizeLinearsTensorOps, TransposeSwapsTwoDimensions) {
  ReferenceTensorOps ops;
  TensorInfo t = ops.transpose(ops.make({2, 3}, {1, 2, 3, 4, 5, 6}), 0, 1);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ops.values(t), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  TensorInfo c = ops.transpose(ops.make({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), 0, -1);
  EXPECT_EQ(ops.values(c), (std::vector<double>{0, 4, 2, 6, 1, 5, 3, 7}));
}

}  // namespace
}  // namespace fxopt
