// Reverse on a record that no longer fits (a user's edit of node.meta, a record from another
// version): every pass fails the same way, with the RecordError naming the node, the record and
// the field, before it rebuilt anything. (The bridge drops the edit log of a failed pass, so
// the GraphModule stays as it was: tests/python/test_records.py.)
#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/change_activation.h"
#include "passes/change_true_div_to_mul_by_inverse.h"
#include "passes/eliminate_dead_code.h"
#include "passes/merge_linears.h"

namespace fxopt {
namespace {

const std::string kSig = "Pass-test";

class CorruptedRecordTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  // Replaces field `key` of the record kSig left on `node`, as a user editing node.meta would.
  void corrupt(Node* node, const std::string& key, Arg value) {
    Tuple entries = node->meta().find(kReversalKey)->as<Tuple>();
    for (Arg& entry : entries.items) {
      Tuple& pair = std::get<Tuple>(entry.value);
      if (pair.items[0] != Arg(kSig)) continue;
      for (Arg& field : std::get<Tuple>(pair.items[1].value).items) {
        Tuple& kv = std::get<Tuple>(field.value);
        if (kv.items[0] == Arg(key)) kv.items[1] = value;
      }
    }
    EditLog scratch;
    Rewriter(program, scratch).set_meta(node, kReversalKey, std::move(entries));
  }

  // Reverses `pass`, which must fail with a RecordError naming `node` and `field` and leave
  // the graph's nodes as they were.
  void expect_record_error(const Pass& pass, const std::string& node, const std::string& field,
                           const std::string& problem) {
    std::vector<std::string> graph_before = structure();
    try {
      run_pass(pass, program, edits, ops, kSig, /*reverse=*/true);
      ADD_FAILURE() << "reverse did not fail";
    } catch (const RecordError& e) {
      EXPECT_EQ(e.node(), node);
      EXPECT_EQ(e.record(), kSig);
      EXPECT_EQ(e.field(), field);
      EXPECT_EQ(std::string(e.what()), "node '" + node + "': reversal record " + kSig +
                                           " does not fit: field '" + field + "' " + problem);
    }
    EXPECT_EQ(structure(), graph_before);
  }
};

TEST_F(CorruptedRecordTest, ChangeTrueDivToMulByInverse) {
  Node* x = b.input("x");
  Node* div = b.call("truediv", "_operator.truediv", {x, 8});
  b.output(div);
  ChangeTrueDivToMulByInverse pass;
  run_pass(pass, program, edits, ops, kSig, false);
  corrupt(div, "target", 5);
  expect_record_error(pass, "truediv", "target", "is not a string (5)");
}

TEST_F(CorruptedRecordTest, MergeLinears) {
  linear_module("q", 4, 5, true);
  linear_module("k", 4, 5, true);
  Node* x = b.input("x");
  Node* q = b.module("q", "q", {x});
  Node* k = b.module("k", "k", {x});
  b.output(Tuple{{q, k}});
  MergeLinears pass;
  run_pass(pass, program, edits, ops, kSig, false);
  corrupt(q, "start", "zero");
  expect_record_error(pass, "q", "start", "is not an integer ('zero')");
}

TEST_F(CorruptedRecordTest, ChangeActivation) {
  program.modules["act"] = ModuleInfo{
      Symbol::intern("torch.nn.modules.activation.GELU"), Dict{{{"approximate", "none"}}}, {}};
  Node* x = b.input("x");
  Node* act = b.module("act", "act", {x});
  b.output(act);
  ChangeActivation pass("gelu", "gelu_tanh");
  run_pass(pass, program, edits, ops, kSig, false);
  corrupt(act, "kind", "call_nothing");
  expect_record_error(pass, "act", "kind", "is not a node kind ('call_nothing')");
}

// The driver's own record of removed nodes, on the output node, reads the same way.
TEST_F(CorruptedRecordTest, RemovalRecordOfEliminateDeadCode) {
  Node* x = b.input("x");
  b.call("relu", "aten.relu.default", {x});
  Node* out = b.output(x);
  EliminateDeadCode pass;
  ASSERT_EQ(run_pass(pass, program, edits, ops, kSig, false).changed.size(), 1u);
  corrupt(out, "removed", Tuple{{Tuple{{Arg(5)}}}});
  expect_record_error(pass, "output", "removed[0][0]", "is not a tuple (5)");
}

}  // namespace
}  // namespace fxopt
