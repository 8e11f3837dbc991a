#include <gtest/gtest.h>

#include "graph_builder.h"
#include "ir/graph.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;

TEST(Symbol, InterningIsStable) {
  Symbol a = Symbol::intern("torch.relu");
  Symbol b = Symbol::intern(std::string("torch.") + "relu");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.str(), "torch.relu");
  EXPECT_NE(a, Symbol::intern("torch.sigmoid"));
  EXPECT_TRUE(Symbol().empty());
}

TEST(Graph, UseListsFollowArguments) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* y = b.call("add", "_operator.add", {x, x});
  Node* z = b.call("mul", "_operator.mul", {y, List{{x, 2.0}}});
  b.output(z);
  ASSERT_EQ(x->users().size(), 2u);  // a node reading x twice counts once
  EXPECT_EQ(x->users()[0], y);
  EXPECT_EQ(x->users()[1], z);
  g.set_inputs(z, {y, 3}, {});
  EXPECT_EQ(x->users(), std::vector<Node*>{y});
  EXPECT_TRUE(g.lint().empty());
}

TEST(Graph, InsertReplaceErase) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* relu = b.call("relu", "torch.relu", {x});
  Node* out = b.output(relu);
  Node* sig =
      g.insert_before(relu, NodeKind::CallFunction, Symbol::intern("torch.sigmoid"), "relu", {x});
  EXPECT_EQ(sig->name(), "relu_1");  // fx-style dedup of the hint
  EXPECT_TRUE(g.before(x, sig));
  EXPECT_TRUE(g.before(sig, relu));
  g.replace_all_uses(relu, sig);
  EXPECT_EQ(out->args()[0].node(), sig);
  g.erase(relu);
  EXPECT_TRUE(relu->erased());
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.find_by_name("relu"), nullptr);
  EXPECT_TRUE(g.lint().empty());
}

// fx never names a node after a Python builtin (it appends _1); neither does the core once the
// bridge reserved the name, so records naming a created node stay valid after the sync.
TEST(Graph, ReservedNamesAreNeverGiven) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  b.output(x);
  g.reserve_names({"abs", "round"});
  Node* out = g.last();
  EXPECT_EQ(
      g.insert_before(out, NodeKind::CallFunction, Symbol::intern("aten.abs.default"), "abs", {x})
          ->name(),
      "abs_1");
  EXPECT_EQ(
      g.insert_before(out, NodeKind::CallFunction, Symbol::intern("aten.abs.default"), "abs", {x})
          ->name(),
      "abs_2");
  EXPECT_EQ(
      g.insert_before(out, NodeKind::CallFunction, Symbol::intern("aten.relu.default"), "relu", {x})
          ->name(),
      "relu");
}

TEST(Graph, EraseRefusesNodesInUse) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  b.output(x);
  EXPECT_THROW(g.erase(x), std::invalid_argument);
}

// Nodes are stored in blocks and found by id without a table: ids and names must keep finding
// the same node past a block boundary, and a rejected duplicate must not take an id.
TEST(Graph, IdsAndNamesFindNodesAcrossBlocks) {
  Graph g;
  GraphBuilder b(g);
  std::vector<Node*> nodes{b.input("x")};
  for (int i = 1; i < 1000; ++i)
    nodes.push_back(b.call("n" + std::to_string(i), "torch.relu", {nodes.back()}));
  EXPECT_THROW(b.call("n7", "torch.relu", {nodes.back()}), std::invalid_argument);
  Node* last = b.output(nodes.back());
  EXPECT_EQ(last->id(), 1001u);
  EXPECT_EQ(g.find_by_name("n7")->id(), 8u);
  for (Node* n : nodes) {
    EXPECT_EQ(g.find_by_id(n->id()), n);
    EXPECT_EQ(g.find_by_name(n->name()), n);
  }
  EXPECT_EQ(g.find_by_id(0), nullptr);
  EXPECT_EQ(g.find_by_id(g.next_id()), nullptr);
  EXPECT_EQ(nodes[0]->users(), std::vector<Node*>{nodes[1]});
  EXPECT_TRUE(g.lint().empty());
}

// The name index shifts entries back into the slot an erased name frees: every other name must
// still be found, and freed names taken again, whatever the collisions.
TEST(Graph, NamesStayFoundThroughErasesAndReuse) {
  Graph g;
  GraphBuilder b(g);
  std::vector<Node*> nodes;
  for (int i = 0; i < 3000; ++i) nodes.push_back(b.input("x" + std::to_string(i)));
  for (size_t i = 0; i < nodes.size(); i += 3) g.erase(nodes[i]);
  for (size_t i = 0; i < nodes.size(); ++i)
    EXPECT_EQ(g.find_by_name(nodes[i]->name()), i % 3 ? nodes[i] : nullptr) << i;
  for (size_t i = 0; i < nodes.size(); i += 3) {
    Node* again = b.input(nodes[i]->name());
    EXPECT_EQ(g.find_by_name(again->name()), again);
  }
  for (size_t i = 1; i < nodes.size(); i += 3)
    EXPECT_EQ(g.find_by_name(nodes[i]->name()), nodes[i]);
  EXPECT_THROW(b.input("x1"), std::invalid_argument);
  EXPECT_EQ(g.unique_name("x1"), "x1_1");
}

TEST(Graph, AnErasedNameIsGivenAgainAsItWas) {
  // Issue 21 item 9: a reverse in the session that made the forward edits recreates a node
  // under the name it had; the name must not depend on what was erased before.
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* bias = g.insert_before(x, NodeKind::GetAttr, Symbol::intern("b"), "bias", {});
  g.erase(bias);
  EXPECT_EQ(g.unique_name("bias"), "bias");
  Node* again = g.insert_before(x, NodeKind::GetAttr, Symbol::intern("b"), "bias", {});
  EXPECT_EQ(again->name(), "bias");
  EXPECT_EQ(g.unique_name("bias"), "bias_1");
}

TEST(Graph, IndexFindsByKindAndTargetInOrder) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* a = b.call("a", "torch.relu", {x});
  Node* m = b.method("m", "relu", {a});
  Node* c = b.call("c", "torch.relu", {m});
  b.output(c);
  Symbol relu = Symbol::intern("torch.relu");
  EXPECT_EQ(g.find(NodeKind::CallFunction, relu), (std::vector<Node*>{a, c}));
  EXPECT_EQ(g.find(NodeKind::CallMethod, Symbol::intern("relu")), std::vector<Node*>{m});
  // A node inserted at the front is found first; a retargeted node moves buckets.
  Node* first = g.insert_before(a, NodeKind::CallFunction, relu, "first", {x});
  g.set_target(c, NodeKind::CallFunction, Symbol::intern("torch.sigmoid"));
  EXPECT_EQ(g.find(NodeKind::CallFunction, relu), (std::vector<Node*>{first, a}));
  g.erase(first);
  EXPECT_EQ(g.find(NodeKind::CallFunction, relu), std::vector<Node*>{a});
}

TEST(Graph, ManyInsertsAtOnePlaceKeepOrder) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* out = b.output(x);
  std::vector<Node*> inserted;
  for (int i = 0; i < 100; ++i)  // exhausts the position gap and forces a renumbering
    inserted.push_back(g.insert_before(out, NodeKind::CallFunction, Symbol::intern("f"), "f", {x}));
  for (size_t i = 1; i < inserted.size(); ++i) EXPECT_TRUE(g.before(inserted[i - 1], inserted[i]));
  EXPECT_TRUE(g.before(inserted.back(), out));
}

TEST(Graph, LintNamesTheNodeAndProblem) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* late = b.call("late", "torch.relu", {x});
  b.output(late);
  // Make `late` read a node defined after it.
  Node* after =
      g.insert_before(g.last(), NodeKind::CallFunction, Symbol::intern("torch.neg"), "after", {x});
  g.set_inputs(late, {after}, {});
  auto errors = g.lint();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].node, "late");
  EXPECT_NE(errors[0].problem.find("before it is defined"), std::string::npos);
}

TEST(Graph, LintReportsMissingOutput) {
  Graph g;
  GraphBuilder(g).input("x");
  auto errors = g.lint();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].node, "x");
}

TEST(Arg, MapAndVisitNestedNodes) {
  Graph g;
  GraphBuilder b(g);
  Node* x = b.input("x");
  Node* y = b.input("y");
  Arg nested = Tuple{{x, List{{y, None{}}}, Dict{{{"k", x}}}}};
  std::vector<Node*> seen;
  nested.for_each_node([&](Node* n) { seen.push_back(n); });
  EXPECT_EQ(seen, (std::vector<Node*>{x, y, x}));
  Arg swapped = nested.map_nodes([&](Node* n) { return n == x ? y : n; });
  EXPECT_EQ(to_string(swapped), "(%y, [%y, None], {'k': %y})");
  EXPECT_EQ(to_string(Tuple{{Arg(1)}}), "(1,)");
}

}  // namespace
}  // namespace fxopt
