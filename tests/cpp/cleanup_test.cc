// The graph cleanup passes (EliminateDeadCode, EliminateCommonSubexpressions, RemoveNoOps,
// RemoveRuntimeAsserts) and the reversible removal they share (rewrite/removal.h).
#include <gtest/gtest.h>

#include "norm_fixtures.h"
#include "passes/eliminate_common_subexpressions.h"
#include "passes/eliminate_dead_code.h"
#include "passes/remove_no_ops.h"
#include "passes/remove_runtime_asserts.h"

namespace fxopt {
namespace {

const std::string kSig = "Cleanup-test";

class CleanupTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  template <class P>
  PassResult apply(bool reverse = false, const std::string& signature = kSig) {
    return run_pass(P(), program, edits, ops, signature, reverse);
  }

  // Runs the graph; ops whose value the tests do not need (checks, identities) get kernels here.
  std::vector<TensorInfo> evaluate(const std::map<std::string, TensorInfo>& inputs) {
    testing::ReferenceInterpreter interpreter(program, ops);
    using testing::Value;
    auto first = [](testing::ReferenceInterpreter&, const Node&, const std::vector<Value>& args) {
      return args.at(0);
    };
    auto nothing = [](testing::ReferenceInterpreter&, const Node&, const std::vector<Value>&) {
      return Value(std::monostate{});
    };
    for (const char* f :
         {"aten.dropout.default", "torch.nn.functional.dropout", "aten.clone.default",
          "torch.clone", "aten.detach.default", "aten.alias.default", "aten.view.default",
          "aten._to_copy.default", "aten.to.dtype_layout", "aten.sym_size.int", "aten.ge.Scalar"})
      interpreter.add_kernel(NodeKind::CallFunction, f, first);
    for (const char* m : {"clone", "contiguous", "detach", "view", "transpose", "size"})
      interpreter.add_kernel(NodeKind::CallMethod, m, first);
    for (const char* t : {"torch.nn.modules.dropout.Dropout", "torch.nn.modules.linear.Identity"})
      interpreter.add_kernel(NodeKind::CallModule, t, first);
    for (const char* f : {"aten._assert_scalar.default", "aten._assert_tensor_metadata.default"})
      interpreter.add_kernel(NodeKind::CallFunction, f, nothing);
    interpreter.add_kernel(NodeKind::CallModule, "torch.export._unlift.GuardsFn", nothing);
    return interpreter.run(inputs);
  }

  void module(const std::string& path, const std::string& type, Dict attributes = {}) {
    program.modules[path] = ModuleInfo{Symbol::intern(type), std::move(attributes), {}};
    program.taken_paths.insert(path);
  }

  // An opaque torch.dtype argument, as the bridge imports one.
  Arg dtype(const std::string& name) {
    Opaque opaque{1000 + program.dtype_opaques.size()};
    program.dtype_opaques[opaque.id] = name;
    return opaque;
  }

  std::vector<std::string> reasons(const PassResult& r) {
    std::vector<std::string> out;
    for (const Skip& s : r.skipped) out.push_back(s.node + ": " + s.reason);
    return out;
  }

  TensorInfo x_ = input({2, 3});
};

TEST_F(CleanupTest, DeadCodeGoesInOneRunAndComesBackExactly) {
  linear_module("fc", 3, 3, true);
  module("guard", "torch.export._unlift.GuardsFn");
  attribute("extra", {3});
  Node* x = b.input("x");
  b.attr("unused_weight", "extra");
  b.module("guard_call", "guard", {x});
  Node* a = b.call("mul", "aten.mul.Tensor", {x, 2.0});
  Node* c = b.call("add", "aten.add.Tensor", {a, a});
  b.call("relu", "aten.relu.default", {c});  // end of a dead chain
  b.module("fc_unused", "fc", {x});          // a pure module call nobody reads
  b.method("scaled", "mul_", {x, 1.0});      // in place: kept
  Node* live = b.call("relu_1", "aten.relu.default", {x});
  b.output(Tuple{{live}});
  auto before = evaluate({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply<EliminateDeadCode>();
  // Last to first: each value goes once its readers are gone.
  EXPECT_EQ(forward.changed,
            (std::vector<std::string>{"fc_unused", "relu", "add", "mul", "unused_weight"}));
  EXPECT_EQ(reasons(forward),
            (std::vector<std::string>{"scaled: unused, but kept: it modifies a value in place",
                                      "guard_call: unused, but kept: it is a runtime check"}));
  EXPECT_EQ(program.graph.size(), 5u);  // x, guard_call, scaled, relu_1, output
  EXPECT_TRUE(program.graph.lint().empty());
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);
  // A second run finds nothing more; each reverse undoes one run, the latest first.
  EXPECT_TRUE(apply<EliminateDeadCode>().changed.empty());
  EXPECT_TRUE(apply<EliminateDeadCode>(/*reverse=*/true).changed.empty());

  PassResult back = apply<EliminateDeadCode>(/*reverse=*/true);
  EXPECT_EQ(back.changed.size(), 5u);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_TRUE(program.graph.lint().empty());
  EXPECT_TRUE(program.graph.last()->meta().items.empty());  // record and mark are gone
}

TEST_F(CleanupTest, DeadCodeKeepsEffectsAndUnknownModules) {
  module("custom", "my.package.Logger");
  module("bn", "torch.nn.modules.batchnorm.BatchNorm1d", Dict{{{"training", true}}});
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", true}}});
  Node* x = b.input("x");
  b.input("unused_input");
  b.module("custom_call", "custom", {x});
  b.module("bn_call", "bn", {x});
  b.module("drop_call", "drop", {x});
  b.call("noise", "aten.rand.default", {List{{2, 3}}});
  b.call("check", "aten._assert_scalar.default", {true, "message"});
  b.call("print_1", "builtins.print", {x});
  b.call("relu_", "torch.relu_", {x});
  b.call("grow", "_operator.iadd", {x, x});
  b.output(Tuple{{x}});
  auto graph_before = structure();

  PassResult forward = apply<EliminateDeadCode>();
  EXPECT_TRUE(forward.changed.empty());
  EXPECT_EQ(reasons(forward),
            (std::vector<std::string>{
                "grow: unused, but kept: it modifies a value in place",
                "relu_: unused, but kept: it modifies a value in place",
                "print_1: unused, but kept: it changes interpreter state or prints",
                "check: unused, but kept: it is a runtime check",
                "noise: unused, but kept: it draws random numbers",
                "drop_call: unused, but kept: it draws random numbers",
                "bn_call: unused, but kept: it updates running statistics (batch norm in "
                "training mode)",
                "custom_call: unused, but kept: it calls a module fxopt does not know to be pure",
            }));
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(CleanupTest, RemovedNodesGetTheirMetadataBack) {
  Node* x = b.input("x");
  Node* dead = b.call("dead", "aten.relu.default", {x});
  b.output(Tuple{{x}});
  // What another pass left on the node (its mark and reversal record) must survive the round trip.
  program.graph.set_meta(dead, kMarksKey, Tuple{{Arg("Other-1")}});
  program.graph.set_meta(dead, kReversalKey, Tuple{{Tuple{{Arg("Other-1"), Tuple{}}}}});
  auto graph_before = structure();
  Dict meta_before = dead->meta();

  apply<EliminateDeadCode>();
  EXPECT_EQ(program.graph.find_by_name("dead"), nullptr);
  apply<EliminateDeadCode>(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(program.graph.find_by_name("dead")->meta(), meta_before);
}

TEST_F(CleanupTest, CommonSubexpressionsCollapseAsChains) {
  Node* x = b.input("x");
  Node* a = b.call("mul", "aten.mul.Tensor", {x, 2.0});
  Node* c = b.call("add", "aten.add.Tensor", {a, 1.0});
  Node* a2 = b.call("mul_1", "aten.mul.Tensor", {x, 2.0});
  Node* c2 = b.call("add_1", "aten.add.Tensor", {a2, 1.0});
  Node* both = b.call("mul_2", "aten.mul.Tensor", {c, c2});
  Node* w1 = b.attr("w", "fc.weight");
  Node* w2 = b.attr("w_1", "fc.weight");
  Node* v = b.attr("v", "fc.bias");
  attribute("fc.weight", {2, 3});
  attribute("fc.bias", {2, 3});
  Node* sum = b.call("add_2", "aten.add.Tensor", {both, w1});
  Node* sum2 = b.call("add_3", "aten.add.Tensor", {sum, w2});
  Node* sum3 = b.call("add_4", "aten.add.Tensor", {sum2, v});
  b.output(Tuple{{sum3, c2}});
  auto before = evaluate({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply<EliminateCommonSubexpressions>();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"mul_1", "add_1", "w_1"}));
  EXPECT_EQ(both->args(), (Args{c, c}));
  EXPECT_EQ(sum2->args(), (Args{sum, w1}));
  EXPECT_EQ(v->users().size(), 1u);  // another path: not merged
  EXPECT_EQ(program.graph.last()->args()[0], Arg(Tuple{{sum3, c}}));
  EXPECT_TRUE(program.graph.lint().empty());
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);

  apply<EliminateCommonSubexpressions>(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);
}

TEST_F(CleanupTest, CommonSubexpressionsRespectNumbersRandomnessAndMutation) {
  Node* x = b.input("x");
  Node* y = b.input("y");
  Node* zero = b.call("mul", "aten.mul.Tensor", {x, 0.0});
  Node* minus_zero = b.call("mul_1", "aten.mul.Tensor", {x, -0.0});
  Node* int_two = b.call("mul_2", "aten.mul.Tensor", {x, 2});
  Node* float_two = b.call("mul_3", "aten.mul.Tensor", {x, 2.0});
  Node* kw = b.call("mul_4", "aten.mul.Tensor", {x}, Dict{{{"other", 2.0}}});
  Node* r1 = b.call("rand", "aten.rand.default", {List{{2, 3}}});
  Node* r2 = b.call("rand_1", "aten.rand.default", {List{{2, 3}}});
  // y is written in place between two equal reads of it.
  Node* s1 = b.call("sum", "aten.sum.default", {y});
  Node* write = b.call("add_", "aten.add_.Tensor", {y, 1.0});
  Node* s2 = b.call("sum_1", "aten.sum.default", {y});
  // A view of x written in place taints x's whole alias tree.
  Node* t1 = b.call("clone", "aten.clone.default", {x});
  Node* t2 = b.call("clone_1", "aten.clone.default", {x});
  Node* view = b.call("view", "aten.view.default", {t1, List{{6}}});
  Node* fill = b.call("fill_", "aten.fill_.Scalar", {view, 0.0});
  b.output(Tuple{{zero, minus_zero, int_two, float_two, kw, r1, r2, s1, write, s2, t2, fill}});
  auto graph_before = structure();

  PassResult forward = apply<EliminateCommonSubexpressions>();
  EXPECT_TRUE(forward.changed.empty());
  EXPECT_EQ(reasons(forward),
            (std::vector<std::string>{
                "rand_1: repeats rand, but it draws random numbers",
                "sum_1: repeats sum, but it reads or aliases a value modified in place",
                "clone_1: repeats clone, but clone reads or aliases a value modified in place",
            }));
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(CleanupTest, NoOpsGoInEveryDialect) {
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", false}}});
  module("identity", "torch.nn.modules.linear.Identity");
  linear_module("fc", 3, 3, true);
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3}, "cpu");
  Node* d1 = b.call("dropout", "aten.dropout.default", {x, 0.1, false});
  Node* d2 = b.call("dropout_1", "torch.nn.functional.dropout", {d1}, Dict{{{"p", 0.0}}});
  Node* d3 = b.module("drop", "drop", {d2});
  Node* i = b.module("identity", "identity", {d3});
  Node* det = b.method("detach", "detach", {i});
  Node* al = b.call("alias", "aten.alias.default", {det});
  Node* to =
      b.call("to", "aten.to.dtype_layout", {al},
             Dict{{{"dtype", dtype("float32")}, {"layout", Opaque{7}}, {"device", Opaque{8}}}});
  program.graph.set_value_info(to, "float32", {2, 3}, "cpu");
  Node* cp = b.call("_to_copy", "aten._to_copy.default", {to}, Dict{{{"dtype", dtype("float32")}}});
  Node* view = b.call("view", "aten.view.default", {cp, List{{2, 3}}});
  program.graph.set_value_info(view, "float32", {2, 3}, "cpu");
  Node* fc = b.module("fc", "fc", {view});
  Node* contiguous = b.method("contiguous", "contiguous", {fc});
  Node* clone = b.method("clone", "clone", {contiguous});
  Node* out = b.call("relu", "aten.relu.default", {clone});
  b.output(Tuple{{out}});
  auto before = evaluate({{"x", x_}});
  auto graph_before = structure();

  PassResult forward = apply<RemoveNoOps>();
  EXPECT_EQ(forward.changed,
            (std::vector<std::string>{"dropout", "dropout_1", "drop", "identity", "detach", "alias",
                                      "to", "_to_copy", "view", "contiguous", "clone"}));
  EXPECT_TRUE(forward.skipped.empty()) << reasons(forward).front();
  EXPECT_EQ(fc->args(), Args{x});
  EXPECT_EQ(out->args(), Args{fc});
  EXPECT_EQ(program.graph.size(), 4u);
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);

  apply<RemoveNoOps>(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
  EXPECT_TRUE(program.graph.lint().empty());
}

TEST_F(CleanupTest, NoOpsThatAreNotProvablySoStay) {
  module("drop", "torch.nn.modules.dropout.Dropout", Dict{{{"training", true}}});
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3}, "cpu");
  Node* unknown = b.input("unknown");  // nothing recorded
  Node* d1 = b.call("dropout", "aten.dropout.default", {x, 0.1, true});
  Node* d2 = b.call("dropout_1", "torch.nn.functional.dropout", {d1}, Dict{{{"p", 0.1}}});
  Node* d3 = b.module("drop", "drop", {d2});
  Node* cast = b.call("to", "aten.to.dtype", {x, dtype("float16")});
  Node* moved = b.call("to_1", "aten.to.dtype_layout", {x},
                       Dict{{{"dtype", dtype("float32")}, {"device", Opaque{8}}}});
  program.graph.set_value_info(moved, "float32", {2, 3}, "cuda:0");
  Node* unknown_cast = b.method("float", "float", {unknown});
  Node* maybe_moved = b.method("to_2", "to", {x, Opaque{8}});
  program.graph.set_value_info(maybe_moved, "float32", {2, 3});  // no device: a ShapeProp fact
  Node* format = b.call("clone", "aten.clone.default", {x}, Dict{{{"memory_format", Opaque{9}}}});
  Node* returned = b.call("clone_1", "aten.clone.default", {x});
  Node* written = b.method("clone_2", "clone", {x});
  Node* write = b.method("add_", "add_", {written, 1.0});
  Node* t = b.method("transpose", "transpose", {x, 0, 1});
  Node* strided = b.method("contiguous", "contiguous", {t});
  Node* reshaped = b.call("view", "aten.view.default", {x, List{{3, 2}}});
  program.graph.set_value_info(reshaped, "float32", {3, 2}, "cpu");
  Node* dynamic = b.call("view_1", "aten.view.default", {unknown, List{{-1}}});
  // A lowered graph: the value a bfloat16 cast feeds is still recorded float32 (the trace's
  // fact), so the cast back to float32 at its end is no no-op.
  Node* low = b.call("to_3", "aten.to.dtype", {x, dtype("bfloat16")});
  Node* gelu = b.call("gelu", "aten.gelu.default", {low});
  program.graph.set_value_info(gelu, "float32", {2, 3}, "cpu");
  Node* back = b.call("to_4", "aten.to.dtype", {gelu, dtype("float32")});
  b.output(Tuple{{d3, cast, moved, unknown_cast, maybe_moved, format, returned, write, strided,
                  reshaped, dynamic, back}});
  auto graph_before = structure();

  PassResult forward = apply<RemoveNoOps>();
  EXPECT_TRUE(forward.changed.empty());
  EXPECT_EQ(
      reasons(forward),
      (std::vector<std::string>{
          "dropout: dropout in training mode (or training unknown) with p > 0",
          "dropout_1: dropout in training mode (or training unknown) with p > 0",
          "drop: dropout in training mode (or training unknown) with p > 0",
          "to: casts float32 to float16",
          "to_1: moves the value from cpu to cuda:0",
          "float: the dtypes it casts between are not recorded (trace with torch.export, or run "
          "ShapeProp)",
          "to_2: may move the value to another device, and the devices are not recorded",
          "clone: may change the memory format",
          "clone_1: the graph returns this copy; without it, it would return an alias",
          "clone_2: a copy whose result or input is modified in place",
          "contiguous: its input may not be contiguous (only Linear, matmul and embedding results "
          "are known to be)",
          "view: changes the shape",
          "view_1: its input's or result's shape is not recorded with static sizes",
          "to_3: casts float32 to bfloat16",
          "to_4: casts bfloat16 to float32",
      }));
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(CleanupTest, RuntimeChecksGoWithTheValuesOnlyTheyRead) {
  module("_guards_fn", "torch.export._unlift.GuardsFn");
  Node* x = b.input("x");
  b.module("_guards_fn", "_guards_fn", {x});
  Node* size = b.call("sym_size_int", "aten.sym_size.int", {x, 0});
  Node* ge = b.call("ge", "aten.ge.Scalar", {size, 2});
  b.call("_assert_scalar_default", "aten._assert_scalar.default", {ge, "size >= 2"});
  b.call("_assert_tensor_metadata_default", "aten._assert_tensor_metadata.default", {x},
         Dict{{{"dtype", dtype("float32")}}});
  // A size read elsewhere stays.
  Node* size2 = b.call("sym_size_int_1", "aten.sym_size.int", {x, 1});
  Node* ge2 = b.call("ge_1", "aten.ge.Scalar", {size2, 1});
  b.call("_assert_scalar_default_1", "aten._assert_scalar.default", {ge2, "size >= 1"});
  Node* view = b.call("view", "aten.view.default", {x, List{{size2, -1}}});
  b.output(Tuple{{view}});
  auto graph_before = structure();

  PassResult forward = apply<RemoveRuntimeAsserts>();
  EXPECT_EQ(forward.changed,
            (std::vector<std::string>{"_guards_fn", "_assert_scalar_default", "ge", "sym_size_int",
                                      "_assert_tensor_metadata_default", "_assert_scalar_default_1",
                                      "ge_1"}));
  EXPECT_EQ(program.graph.size(), 4u);  // x, sym_size_int_1, view, output
  EXPECT_FALSE(size2->erased());
  EXPECT_TRUE(program.graph.lint().empty());

  apply<RemoveRuntimeAsserts>(/*reverse=*/true);
  EXPECT_EQ(structure(), graph_before);
}

TEST_F(CleanupTest, CompositionsReverseInAnyOrderOfPasses) {
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {2, 3}, "cpu");
  Node* d1 = b.call("dropout", "aten.dropout.default", {x, 0.1, false});
  Node* a = b.call("mul", "aten.mul.Tensor", {d1, 2.0});
  Node* d2 = b.call("dropout_1", "aten.dropout.default", {x, 0.1, false});
  Node* a2 = b.call("mul_1", "aten.mul.Tensor", {d2, 2.0});  // same as mul once no-ops go
  Node* dead = b.call("mul_2", "aten.mul.Tensor", {a2, a2});
  b.call("relu", "aten.relu.default", {dead});
  Node* check = b.call("_assert_tensor_metadata_default", "aten._assert_tensor_metadata.default",
                       {a}, Dict{{{"dtype", dtype("float32")}}});
  (void)check;
  Node* sum = b.call("add_1", "aten.add.Tensor", {a, a2});
  b.output(Tuple{{sum}});
  auto before = evaluate({{"x", x_}});
  auto graph_before = structure();

  apply<RemoveNoOps>(false, "NoOps");
  apply<EliminateCommonSubexpressions>(false, "Cse");
  apply<RemoveRuntimeAsserts>(false, "Asserts");
  apply<EliminateDeadCode>(false, "Dce");
  EXPECT_EQ(sum->args(), (Args{a, a}));
  EXPECT_EQ(program.graph.size(), 4u);  // x, mul, add_1, output
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);
  // The output node carries one record per pass.
  EXPECT_EQ(program.graph.last()->meta().find(kReversalKey)->sequence()->size(), 4u);

  apply<EliminateDeadCode>(true, "Dce");
  apply<RemoveRuntimeAsserts>(true, "Asserts");
  apply<EliminateCommonSubexpressions>(true, "Cse");
  apply<RemoveNoOps>(true, "NoOps");
  EXPECT_EQ(structure(), graph_before);
  EXPECT_TRUE(program.graph.last()->meta().items.empty());
  EXPECT_EQ(max_diff(before, evaluate({{"x", x_}})), 0.0);
}

TEST_F(CleanupTest, ATransformationTwiceInACompositionReversesRunByRun) {
  Node* x = b.input("x");
  Node* d = b.call("dropout", "aten.dropout.default", {x, 0.1, false});
  b.call("dead", "aten.relu.default", {d});
  Node* y = b.call("y", "aten.relu.default", {d});
  b.output(Tuple{{y}});
  auto graph_before = structure();

  // compose(EliminateDeadCode(), RemoveNoOps(), EliminateDeadCode()): equal signatures.
  EXPECT_EQ(apply<EliminateDeadCode>(false, "Dce").changed, std::vector<std::string>{"dead"});
  EXPECT_EQ(apply<RemoveNoOps>(false, "NoOps").changed, std::vector<std::string>{"dropout"});
  EXPECT_TRUE(apply<EliminateDeadCode>(false, "Dce").changed.empty());

  // Reverse undoes the second run (nothing) first: `dead` reads `dropout`, which is back only
  // once RemoveNoOps is reversed.
  EXPECT_TRUE(apply<EliminateDeadCode>(true, "Dce").changed.empty());
  EXPECT_TRUE(is_marked(*program.graph.last(), "Dce"));
  EXPECT_EQ(apply<RemoveNoOps>(true, "NoOps").changed, std::vector<std::string>{"dropout"});
  EXPECT_EQ(apply<EliminateDeadCode>(true, "Dce").changed, std::vector<std::string>{"dead"});
  EXPECT_EQ(structure(), graph_before);
  EXPECT_TRUE(program.graph.last()->meta().items.empty());
}

TEST_F(CleanupTest, ReverseAfterAnUnrecordedEditNamesWhatIsMissing) {
  Node* x = b.input("x");
  Node* dead = b.call("dead", "aten.relu.default", {x});
  Node* y = b.call("y", "aten.relu.default", {x});
  b.output(Tuple{{y}});
  (void)dead;
  apply<EliminateDeadCode>();
  // Someone else replaces x's consumer and drops x's name from the graph.
  Rewriter rewriter(program, edits);
  Node* x2 = rewriter.insert_before(x, NodeKind::Placeholder, Symbol::intern("x2"), "x2", {});
  rewriter.replace_all_uses(x, x2);
  rewriter.erase(x);
  try {
    apply<EliminateDeadCode>(/*reverse=*/true);
    FAIL() << "reverse should fail";
  } catch (const PassError& e) {
    EXPECT_EQ(std::string(e.what()),
              "node 'output': cannot put back removed node 'dead': the node 'x' is no longer in "
              "the graph");
  }
}

}  // namespace
}  // namespace fxopt
