#include <gtest/gtest.h>

#include "graph_builder.h"
#include "rewrite/capture.h"
#include "rewrite/marks.h"
#include "rewrite/rewriter.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;

TEST(Rewriter, LogsEveryEditInOrder) {
  Program p;
  EditLog log;
  GraphBuilder b(p.graph);
  Node* x = b.input("x");
  Node* relu = b.call("relu", "torch.relu", {x});
  Node* out = b.output(relu);
  Rewriter rw(p, log);

  Node* gelu = rw.insert_before(relu, NodeKind::CallFunction, Symbol::intern("torch._C._nn.gelu"),
                                "gelu", {x});
  rw.replace_and_erase(relu, gelu);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].kind, Edit::Kind::CreateNode);
  EXPECT_EQ(log[0].anchor, relu->id());
  EXPECT_EQ(log[0].name, "gelu");
  EXPECT_EQ(log[1].kind, Edit::Kind::SetInputs);
  EXPECT_EQ(log[1].node, out->id());
  EXPECT_EQ(log[1].args[0].node(), gelu);
  EXPECT_EQ(log[2].kind, Edit::Kind::EraseNode);
  EXPECT_EQ(log[2].node, relu->id());
  EXPECT_TRUE(p.graph.lint().empty());
}

TEST(Rewriter, ANodeComputingAnImportedValueNamesIt) {
  // A fused call that stands for `relu` takes its recorded value, and so does a call that later
  // stands for the fused one: both name the imported node, whose fx node holds the value.
  Program p;
  EditLog log;
  GraphBuilder b(p.graph);
  Node* x = b.input("x");
  Node* relu = b.call("relu", "torch.relu", {x});
  b.output(relu);
  p.graph.set_value_info(relu, "float32", {-2, 8}, "cpu");
  Rewriter rw(p, log);
  Symbol gelu = Symbol::intern("torch._C._nn.gelu");

  Node* fused = rw.insert_before(relu, NodeKind::CallFunction, gelu, "fused", {x});
  EXPECT_EQ(fused->value_twin(), 0u);
  rw.share_value_info(*relu, fused);
  rw.replace_and_erase(relu, fused);
  Node* again = rw.insert_before(fused, NodeKind::CallFunction, gelu, "again", {x});
  rw.share_value_info(*fused, again);
  EXPECT_EQ(fused->value_twin(), relu->id());
  EXPECT_EQ(again->value_twin(), relu->id());
  EXPECT_EQ(again->shape(), (std::vector<int64_t>{-2, 8}));
  EXPECT_EQ(again->dtype(), "float32");
  EXPECT_EQ(again->device(), "cpu");
  // Without recorded facts there is nothing to share.
  Node* unknown = rw.insert_before(again, NodeKind::CallFunction, gelu, "unknown", {x});
  Node* other = rw.insert_before(again, NodeKind::CallFunction, gelu, "other", {x});
  rw.share_value_info(*unknown, other);
  EXPECT_EQ(other->value_twin(), 0u);
  EXPECT_FALSE(other->rank());
}

TEST(Rewriter, ModuleEditsReservePaths) {
  Program p;
  EditLog log;
  p.taken_paths = {"fc", "fc_1"};
  Rewriter rw(p, log);
  std::string path = rw.unique_path("fc");
  EXPECT_EQ(path, "fc_2");
  rw.set_module(path, "fc", ModuleInfo{Symbol::intern("torch.nn.modules.linear.Linear"), {}, {}});
  EXPECT_EQ(rw.unique_path("fc"), "fc_3");
  EXPECT_NE(p.module(Symbol::intern("fc_2")), nullptr);
  rw.remove_module("fc_2");
  EXPECT_EQ(p.module(Symbol::intern("fc_2")), nullptr);
  EXPECT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].like, "fc");
}

TEST(Marks, MarksAndRecordsPerSignature) {
  Program p;
  EditLog log;
  Node* x = GraphBuilder(p.graph).input("x");
  Rewriter rw(p, log);
  mark(rw, x, "A()");
  mark(rw, x, "B()");
  mark(rw, x, "A()");
  EXPECT_EQ(to_string(*x->meta().find(kMarksKey)), "('A()', 'B()')");
  set_reversal_record(rw, x, "A()", Record().set("divisor", 3));
  set_reversal_record(rw, x, "B()", Record().set("divisor", 4.5));
  EXPECT_EQ(reversal_record(*x, "A()")->at("divisor").value(), Arg(3));
  EXPECT_EQ(reversal_record(*x, "B()")->at("divisor").value(), Arg(4.5));
  EXPECT_THROW(reversal_record(*x, "A()")->at("missing"), RecordError);
  clear_reversal_record(rw, x, "A()");
  EXPECT_FALSE(reversal_record(*x, "A()").has_value());
  EXPECT_FALSE(has_reversal_record(*x, "A()"));
  EXPECT_TRUE(has_reversal_record(*x, "B()"));
  unmark(rw, x, "A()");
  EXPECT_FALSE(is_marked(*x, "A()"));
  EXPECT_TRUE(is_marked(*x, "B()"));
  EXPECT_EQ(marked_nodes(p.graph, "B()"), std::vector<Node*>{x});
}

// A pass that erases a node another pass changed (oneDNN fusion capturing a bias-fused Linear)
// must hand back the other pass's mark and record with the node, or that pass's reverse no
// longer finds it and silently does nothing.
TEST(Capture, RebuiltNodesKeepOtherTransformationsMarksAndRecords) {
  Program p;
  EditLog log;
  GraphBuilder b(p.graph);
  Node* x = b.input("x");
  Node* relu = b.call("relu", "torch.relu", {x});
  Node* out = b.output(relu);
  Rewriter rw(p, log);
  mark(rw, relu, "A()");
  set_reversal_record(rw, relu, "A()", Record().set("k", 1));

  Node* const captured[] = {relu};
  Node* const inputs[] = {x};
  RecordReader record(*out, "test",
                      Record().set("nodes", *capture_nodes(captured, inputs)).to_arg());
  rw.replace_all_uses(relu, x);
  rw.erase(relu);
  std::vector<Node*> rebuilt = rebuild_nodes(rw, out, record.at("nodes"), inputs);
  ASSERT_EQ(rebuilt.size(), 1u);
  EXPECT_EQ(rebuilt[0]->name(), "relu");
  EXPECT_TRUE(is_marked(*rebuilt[0], "A()"));
  EXPECT_EQ(reversal_record(*rebuilt[0], "A()")->at("k").value(), Arg(1));
}

}  // namespace
}  // namespace fxopt
