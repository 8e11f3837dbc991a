#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/eliminate_dead_code.h"
#include "passes/fold_constants.h"

namespace fxopt {
namespace {

const std::string kSig = "FoldConstants-test";

class FoldConstantsTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  FoldConstantsTest() {
    // The reference TensorOps runs a folded call with the interpreter's own kernels.
    ops.evaluator = [this](const Node& node, const std::vector<TensorInfo>& operands) {
      std::map<const Node*, testing::Value> env;
      size_t next = 0;
      node.for_each_input([&](Node* input) { env[input] = operands.at(next++); });
      testing::Value v = testing::ReferenceInterpreter(program, ops).call(node, env);
      const TensorInfo* t = std::get_if<TensorInfo>(&v);
      return t ? std::optional<TensorInfo>(*t) : std::nullopt;
    };
  }
  PassResult apply(bool reverse = false) {
    return run_pass(FoldConstants(), program, edits, ops, kSig, reverse);
  }
};

TEST_F(FoldConstantsTest, AWeightTransformedInForwardIsComputedOnceAndReversesExactly) {
  attribute("w", {3, 4});
  Node* x = b.input("x");
  Node* w = b.attr("w", "w");
  Node* scaled = b.call("scaled", "aten.mul.Tensor", {w, 2.0});
  Node* wt = b.call("wt", "aten.t.default", {scaled});
  b.output(Tuple{{b.call("y", "aten.mm.default", {x, wt})}});
  TensorInfo x_value = input({2, 4});
  auto before = run({{"x", x_value}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"wt"}));  // the frontier only
  EXPECT_TRUE(forward.skipped.empty());
  Node* folded = program.graph.find_by_name("wt");
  ASSERT_NE(folded, nullptr);
  EXPECT_EQ(folded->kind(), NodeKind::GetAttr);
  EXPECT_EQ(folded->target().str(), "_folded_wt");
  EXPECT_EQ(program.attributes.at("_folded_wt").shape, (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(scaled->users().empty());  // interior: dead code now
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
  EXPECT_TRUE(program.graph.lint().empty());

  // With dead-code elimination the graph reads one stored tensor.
  run_pass(EliminateDeadCode(), program, edits, ops, "dce", false);
  EXPECT_EQ(program.graph.size(), 4u);  // x, wt (get_attr), y, output
  run_pass(EliminateDeadCode(), program, edits, ops, "dce", true);

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"wt"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("_folded_wt"));
  EXPECT_EQ(max_diff(before, run({{"x", x_value}})), 0.0);
}

TEST_F(FoldConstantsTest, LeavesValuesThatDependOnInputsOrAreMutated) {
  attribute("w", {3, 3});
  attribute("buf", {3, 3});
  Node* x = b.input("x");
  Node* w = b.attr("w", "w");
  Node* buf = b.attr("buf", "buf");
  b.call("update", "aten.add_.Tensor", {buf, 1.0});  // buf is written in place
  Node* from_buf = b.call("from_buf", "aten.mul.Tensor", {buf, 2.0});
  Node* from_x = b.call("from_x", "aten.mul.Tensor", {x, w});
  b.output(Tuple{{from_buf, from_x}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_TRUE(forward.changed.empty());
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(FoldConstantsTest, SkipsCallsTheTensorOpsCannotRun) {
  ops.evaluator = nullptr;  // e.g. an op that fails outside its graph, or returns no tensor
  attribute("w", {2, 2});
  Node* x = b.input("x");
  Node* wt = b.call("wt", "aten.t.default", {b.attr("w", "w")});
  b.output(Tuple{{b.call("y", "aten.mm.default", {x, wt})}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_TRUE(forward.changed.empty());
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].node, "wt");
  EXPECT_EQ(forward.skipped[0].reason, "its value is not a tensor");
  EXPECT_EQ(structure(), graph_before);
}

}  // namespace
}  // namespace fxopt
