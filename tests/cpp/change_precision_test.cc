#include <gtest/gtest.h>

#include <algorithm>

#include "norm_fixtures.h"
#include "passes/change_precision.h"

namespace fxopt {
namespace {

const std::string kSig = "ChangePrecision-test";

class ChangePrecisionTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  PassResult apply(bool reverse = false) {
    return run_pass(ChangePrecision("float16", Opaque{7}), program, edits, ops, kSig, reverse);
  }
  // float16, with float32 results cast back through dtype object 9.
  ChangePrecision lowering_cast_back() {
    program.dtype_opaques[9] = "float32";
    Dict back;
    back.set("float32", Opaque{9});
    return ChangePrecision("float16", Opaque{7}, back);
  }
  size_t casts() const {
    size_t n = 0;
    for (const Node* node : program.graph) n += node->name().starts_with("to");
    return n;
  }
  // fxopt's int8 Linears compute in their input's dtype: the lowering passes through them
  // without casts and leaves the tensors only they read besides x (the int8 weight's scales, the
  // bias) in float32. One whose result is a graph output reads its input cast back up instead,
  // so its result needs no cast (`output_only`); otherwise the lowered value after it is cast
  // back at the output.
  void expect_int8_linear_follows_its_input(const char* target, bool output_only) {
    attribute("fc.weight", {4, 4});
    attribute("q.scale", {4});
    attribute("q.bias", {4});
    Node* x = b.input("x");
    Node* fc = b.call("linear", "aten.linear.default", {x, b.attr("fc_weight", "fc.weight")});
    Node* values = b.attr("q_values", "q.scale");  // its dtype does not matter here
    Node* scale = b.attr("q_scale", "q.scale");
    Node* bias = b.attr("q_bias", "q.bias");
    Node* int8 = b.call("int8_linear", target, {fc, values, scale, bias});
    Node* result = output_only ? int8 : b.call("relu", "aten.relu.default", {int8});
    b.output(result);
    for (Node* n : {x, fc, int8, result}) program.graph.set_value_info(n, "float32", {4, 4});
    auto graph_before = structure();

    ChangePrecision pass = lowering_cast_back();
    run_pass(pass, program, edits, ops, kSig, /*reverse=*/false);
    EXPECT_EQ(scale->target().str(), "q.scale");  // not lowered
    EXPECT_EQ(bias->target().str(), "q.bias");
    Node* out = program.graph.last()->args()[0].node();
    ASSERT_NE(out, nullptr);
    if (output_only) {
      EXPECT_EQ(int8->args()[0].node()->args(), (Args{fc, Opaque{9}}));  // its input, cast up
      EXPECT_EQ(out, int8);                                              // no cast back
    } else {
      EXPECT_EQ(int8->args()[0], Arg(fc));                // the lowered Linear's result, as it is
      EXPECT_EQ(out->args(), (Args{result, Opaque{9}}));  // lowered: cast back at the output
    }
    EXPECT_TRUE(program.graph.lint().empty());

    run_pass(pass, program, edits, ops, kSig, /*reverse=*/true);
    EXPECT_EQ(structure(), graph_before);
  }
};

TEST_F(ChangePrecisionTest, ModulesAndMethodsRunInFloat16AndBack) {
  linear_module("fc", 4, 4, true);
  linear_module("half", 4, 4, false, "float16");
  ModuleInfo fc_before = program.modules.at("fc");
  Node* x = b.input("x");
  Node* fc = b.module("fc", "fc", {x});
  Node* mm = b.method("matmul", "matmul", {fc, fc});
  Node* half = b.module("half", "half", {mm});
  b.output(half);
  TensorInfo input = this->input({4, 4});
  auto before = run({{"x", input}});
  auto graph_before = structure();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"fc", "matmul"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason, "its weight is float16, not float32 or float64");
  EXPECT_EQ(casts(), 3u);
  EXPECT_EQ(program.graph.size(), 5u + 3 + 2);  // three casts down, two casts back
  EXPECT_EQ(fc->target().str(), "fc_float16");
  const ModuleInfo& low = program.modules.at("fc_float16");
  EXPECT_EQ(low.tensor("weight")->dtype, "float16");
  EXPECT_TRUE(low.tensor("weight")->is_parameter);
  EXPECT_EQ(program.modules.at("fc").tensors, fc_before.tensors);  // copy-on-write
  // The cast down passes the dtype object it was given; the result is cast back to x's dtype.
  Node* to = fc->args()[0].node();
  EXPECT_TRUE(to->is(NodeKind::CallMethod, Symbol::intern("to")));
  EXPECT_EQ(to->args(), (Args{x, Opaque{7}}));
  Node* back = mm->args()[0].node()->args()[0].node();
  EXPECT_TRUE(back->is(NodeKind::CallMethod, Symbol::intern("type_as")));
  EXPECT_EQ(back->args(), (Args{fc, x}));
  EXPECT_EQ(max_diff(before, run({{"x", input}})), 0.0);  // the reference does not round
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"fc", "matmul"}));
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.modules.contains("fc_float16"));
}

TEST_F(ChangePrecisionTest, AtenWeightsGetLowPrecisionAttributes) {
  attribute("fc.weight", {4, 4});
  Node* x = b.input("x");
  Node* w = b.attr("fc_weight", "fc.weight");
  Node* fc = b.call("linear", "aten.linear.default", {x, w});
  Node* mm = b.call("matmul", "aten.matmul.default", {fc, x});
  b.output(Tuple{{mm}});
  auto graph_before = structure();
  std::sort(graph_before.begin(), graph_before.end());

  apply();
  EXPECT_EQ(fc->args()[1].node()->target().str(), "fc.weight_float16");
  EXPECT_EQ(program.attributes.at("fc.weight_float16").dtype, "float16");
  EXPECT_TRUE(fc->args()[0].node()->is(NodeKind::CallFunction, Symbol::intern("aten.to.dtype")));
  EXPECT_EQ(fc->users().front()->target().str(), "aten.type_as.default");

  apply(/*reverse=*/true);
  auto graph_after = structure();
  std::sort(graph_after.begin(), graph_after.end());
  EXPECT_EQ(graph_after, graph_before);
  EXPECT_FALSE(program.attributes.contains("fc.weight_float16"));
}

// With the dtypes of the graph known, the whole graph is lowered: one cast on entry, stored
// tensors converted once, one cast back on exit; a float32 value the graph creates from ints
// stays float32 and is cast down only where an op needs one dtype.
TEST_F(ChangePrecisionTest, KnownDtypesLowerTheWholeGraph) {
  attribute("fc.weight", {4, 4});
  Node* x = b.input("x");
  Node* ids = b.input("ids");
  Node* w = b.attr("fc_weight", "fc.weight");
  Node* fc = b.call("linear", "aten.linear.default", {x, w});
  Node* relu = b.call("relu", "aten.relu.default", {fc});
  Node* mask = b.call("mask", "aten.to.dtype", {ids, Opaque{9}});  // float32 from int64
  Node* mm = b.call("matmul", "aten.matmul.default", {relu, mask});
  b.output(Tuple{{mm, ids}});
  for (Node* n : {x, fc, relu, mask, mm}) program.graph.set_value_info(n, "float32", {4, 4});
  program.graph.set_value_info(ids, "int64", {4, 4});
  program.dtype_opaques[7] = "float16";
  auto graph_before = structure();

  PassResult forward = run_pass(lowering_cast_back(), program, edits, ops, kSig, /*reverse=*/false);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"to", "fc_weight", "to_1", "to_2"}));
  EXPECT_EQ(w->target().str(), "fc.weight_float16");
  EXPECT_EQ(program.attributes.at("fc.weight_float16").dtype, "float16");
  EXPECT_EQ(fc->args()[0].node()->args(), (Args{x, Opaque{7}}));     // entry cast
  EXPECT_EQ(relu->args(), (Args{fc}));                               // follows, no cast
  EXPECT_EQ(mm->args()[1].node()->args(), (Args{mask, Opaque{7}}));  // matching operands
  const Arg& outputs = program.graph.last()->args()[0];
  EXPECT_EQ(outputs.as<Tuple>().items[0].node()->args(), (Args{mm, Opaque{9}}));  // cast back
  EXPECT_EQ(outputs.as<Tuple>().items[1], Arg(ids));  // not a float: untouched
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = run_pass(lowering_cast_back(), program, edits, ops, kSig, /*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"fc_weight"}));  // erased casts: not listed
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.attributes.contains("fc.weight_float16"));
}

// A module fed no float (an Embedding reading token ids): its result is lowered with its
// weights, and cast back at the output (it was taken for a float32 constant of the graph, so a
// lowered BERT returned bfloat16 hidden states).
TEST_F(ChangePrecisionTest, AModuleReadingIntegersGivesALoweredResultCastBack) {
  linear_module("embed", 4, 4, false);
  Node* ids = b.input("ids");
  Node* embed = b.module("embed", "embed", {ids});
  Node* relu = b.call("relu", "aten.relu.default", {embed});
  b.output(Tuple{{relu}});
  program.graph.set_value_info(ids, "int64", {4, 4});
  for (Node* n : {embed, relu}) program.graph.set_value_info(n, "float32", {4, 4});
  auto graph_before = structure();

  ChangePrecision pass = lowering_cast_back();
  PassResult forward = run_pass(pass, program, edits, ops, kSig, /*reverse=*/false);
  EXPECT_EQ(embed->target().str(), "embed_float16");
  EXPECT_EQ(embed->args(), (Args{ids}));  // the ids are not cast
  EXPECT_EQ(relu->args(), (Args{embed}));
  const Arg& outputs = program.graph.last()->args()[0];
  EXPECT_EQ(outputs.as<Tuple>().items[0].node()->args(), (Args{relu, Opaque{9}}));  // cast back
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"embed", "to"}));
  EXPECT_TRUE(program.graph.lint().empty());

  run_pass(pass, program, edits, ops, kSig, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_FALSE(program.modules.contains("embed_float16"));
}

// The same lowering twice: the second changes nothing (it would lower the first's casts) but
// counts as an application of its own (rewrite/marks.h): the first reverse undoes it (nothing),
// the second the first lowering. compose(A, B, A) reverses B between them.
TEST_F(ChangePrecisionTest, TheSameWholeGraphLoweringAgainLeavesTheGraph) {
  attribute("fc.weight", {4, 4});
  Node* x = b.input("x");
  Node* fc = b.call("linear", "aten.linear.default", {x, b.attr("fc_weight", "fc.weight")});
  b.output(fc);
  for (Node* n : {x, fc}) program.graph.set_value_info(n, "float32", {4, 4});
  auto graph_before = structure();
  ChangePrecision pass = lowering_cast_back();
  run_pass(pass, program, edits, ops, kSig, /*reverse=*/false);
  auto lowered = structure();

  PassResult again = run_pass(pass, program, edits, ops, kSig, /*reverse=*/false);
  EXPECT_TRUE(again.changed.empty());
  ASSERT_EQ(again.skipped.size(), 1u);
  EXPECT_EQ(again.skipped[0].reason,
            "the graph is already lowered to float16 by this transformation");
  EXPECT_EQ(structure(), lowered);
  EXPECT_TRUE(is_marked(*program.graph.last(), kSig + "@2"));

  EXPECT_TRUE(run_pass(pass, program, edits, ops, kSig, /*reverse=*/true).changed.empty());
  EXPECT_EQ(structure(), lowered);
  EXPECT_FALSE(is_marked(*program.graph.last(), kSig + "@2"));
  run_pass(pass, program, edits, ops, kSig, /*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(latest_application(program.graph, kSig), 0);
}

TEST_F(ChangePrecisionTest, PerTokenInt8LinearFollowsItsInputAndKeepsItsScales) {
  expect_int8_linear_follows_its_input("fxopt.runtime.per_token_int8.per_token_int8_linear", false);
}

TEST_F(ChangePrecisionTest, PackedInt8LinearFollowsItsInputAndKeepsItsScales) {
  expect_int8_linear_follows_its_input("fxopt.runtime.dynamic_int8.dynamic_int8_linear", false);
}

TEST_F(ChangePrecisionTest, AnInt8LinearThatIsAnOutputReadsItsInputCastUp) {
  expect_int8_linear_follows_its_input("fxopt.runtime.dynamic_int8.dynamic_int8_linear", true);
}

TEST_F(ChangePrecisionTest, OnlyLowPrecisionTargets) {
  EXPECT_THROW(ChangePrecision("float32", Opaque{1}), std::invalid_argument);
}

}  // namespace
}  // namespace fxopt
