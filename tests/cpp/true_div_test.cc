#include <gtest/gtest.h>

#include "graph_builder.h"
#include "ops/targets.h"
#include "passes/change_true_div_to_mul_by_inverse.h"
#include "reference_interpreter.h"

namespace fxopt {
namespace {

using testing::GraphBuilder;
using testing::ReferenceInterpreter;

const std::string kSig = "ChangeTrueDivToMulByInverse()";

class TrueDivTest : public ::testing::Test {
 protected:
  std::vector<TensorInfo> run() { return ReferenceInterpreter(program_, ops_).run({{"x", x_}}); }
  PassResult apply(bool reverse = false) {
    return run_pass(pass_, program_, log_, ops_, kSig, reverse);
  }
  void expect_same_outputs(const std::vector<TensorInfo>& before, double tolerance) {
    auto after = run();
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_LE(testing::max_abs_diff(ops_, before[i], after[i]), tolerance);
  }

  ReferenceTensorOps ops_;
  TensorInfo x_ = ops_.make({2, 3}, {1, -2, 3.5, 4, 0, -6.25});
  Program program_;
  EditLog log_;
  ChangeTrueDivToMulByInverse pass_;
  GraphBuilder b_{program_.graph};
};

TEST_F(TrueDivTest, RewritesEveryDialectAndReversesExactly) {
  Node* x = b_.input("x");
  Node* d1 = b_.call("truediv", "_operator.truediv", {x, 8});
  Node* d2 = b_.call("div", "torch.div", {d1}, Dict{{{"other", 3.0}}});
  Node* d3 = b_.method("div_1", "div", {d2, 0.5});
  Node* d4 = b_.call("div_2", "aten.div.Tensor", {d3, 7.0});
  b_.output(Tuple{{d4}});
  auto before = run();

  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"truediv", "div", "div_1", "div_2"}));
  EXPECT_TRUE(forward.skipped.empty());
  EXPECT_TRUE(d1->is(NodeKind::CallFunction, targets::kOperatorMul));
  EXPECT_EQ(d1->args()[1], Arg(0.125));
  EXPECT_TRUE(d2->is(NodeKind::CallFunction, targets::kTorchMul));
  EXPECT_EQ(*d2->kwargs().find("other"), Arg(1.0 / 3.0));
  EXPECT_TRUE(d3->is(NodeKind::CallMethod, targets::kMethodMul));
  EXPECT_TRUE(d4->is(NodeKind::CallFunction, targets::kAtenMulTensor));
  EXPECT_TRUE(is_marked(*d4, kSig));
  EXPECT_EQ(program_.graph.size(), 6u);
  expect_same_outputs(before, 1e-12);

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed.size(), 4u);
  EXPECT_TRUE(d1->is(NodeKind::CallFunction, targets::kOperatorTrueDiv));
  EXPECT_EQ(d1->args()[1], Arg(8));  // the int comes back as an int, not 1/(1/8.0)
  EXPECT_EQ(*d2->kwargs().find("other"), Arg(3.0));
  EXPECT_EQ(d3->args()[1], Arg(0.5));
  for (Node* d : {d1, d2, d3, d4}) {
    EXPECT_FALSE(is_marked(*d, kSig));
    EXPECT_TRUE(d->meta().items.empty());
  }
  expect_same_outputs(before, 0.0);
  EXPECT_TRUE(program_.graph.lint().empty());
}

TEST_F(TrueDivTest, SkipsWhatItCannotRewrite) {
  Node* x = b_.input("x");
  Node* y = b_.input("y");
  Node* zero = b_.call("zero", "_operator.truediv", {x, 0});
  Node* tensor = b_.call("tensor", "_operator.truediv", {x, y});
  Node* mode = b_.call("mode", "torch.div", {x, 2.0}, Dict{{{"rounding_mode", "floor"}}});
  Node* tiny = b_.call("tiny", "_operator.truediv", {x, 1e-310});
  Node* constant = b_.call("constant", "_operator.truediv", {4.0, 2.0});
  b_.output(Tuple{{zero, tensor, mode, tiny, constant}});

  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 5u);
  EXPECT_EQ(result.skipped[0].node, "zero");
  EXPECT_EQ(result.skipped[0].reason, "divides by zero");
  EXPECT_NE(result.skipped[1].reason.find("not a constant"), std::string::npos);
  EXPECT_NE(result.skipped[2].reason.find("rounding_mode"), std::string::npos);
  EXPECT_NE(result.skipped[3].reason.find("normal"), std::string::npos);
  EXPECT_NE(result.skipped[4].reason.find("dividend"), std::string::npos);
  EXPECT_TRUE(log_.empty());
}

// The multiplication runs in the node's dtype: 1 / 1e-39 is inf in float32, 1 / 1e-5 is beyond
// float16's range, and an unknown dtype is treated as the narrowest (float16).
TEST_F(TrueDivTest, InverseMustBeNormalInTheNodesDtype) {
  Node* x = b_.input("x");
  auto div = [&](const char* name, double divisor, const char* dtype) {
    Node* n = b_.call(name, "_operator.truediv", {x, divisor});
    if (*dtype) program_.graph.set_value_info(n, dtype, {2}, "cpu");
    return n;
  };
  Node* f32_tiny = div("f32_tiny", 1e-39, "float32");
  Node* f32_huge = div("f32_huge", 1e39, "float32");
  Node* f64_tiny = div("f64_tiny", 1e-39, "float64");
  Node* f16 = div("f16", 1e-5, "float16");
  Node* bf16 = div("bf16", 1e-5, "bfloat16");
  Node* unknown = div("unknown", 1e-5, "");
  Node* f32 = div("f32", 1e-5, "float32");
  b_.output(Tuple{{f32_tiny, f32_huge, f64_tiny, f16, bf16, unknown, f32}});

  PassResult result = apply();
  EXPECT_EQ(result.changed, (std::vector<std::string>{"f64_tiny", "bf16", "f32"}));
  ASSERT_EQ(result.skipped.size(), 4u);
  EXPECT_NE(result.skipped[0].reason.find("not a normal number in float32"), std::string::npos);
  EXPECT_EQ(result.skipped[1].node, "f32_huge");
  EXPECT_NE(result.skipped[2].reason.find("float16"), std::string::npos);
  EXPECT_NE(result.skipped[3].reason.find("dtype unknown"), std::string::npos);
}

TEST_F(TrueDivTest, EditLogDescribesTheRewrite) {
  Node* x = b_.input("x");
  Node* d = b_.call("truediv", "_operator.truediv", {x, 4.0});
  b_.output(d);
  apply();
  ASSERT_EQ(log_.size(), 4u);  // target, inputs, reversal record, mark
  EXPECT_EQ(log_[0].kind, Edit::Kind::SetTarget);
  EXPECT_EQ(log_[0].target, targets::kOperatorMul);
  EXPECT_EQ(log_[1].kind, Edit::Kind::SetInputs);
  EXPECT_EQ(log_[1].args[1], Arg(0.25));
  EXPECT_EQ(log_[2].kind, Edit::Kind::SetMeta);
  EXPECT_EQ(log_[2].name, kReversalKey);
  EXPECT_EQ(log_[3].name, kMarksKey);
  for (const Edit& e : log_) EXPECT_EQ(e.node, d->id());
}

TEST_F(TrueDivTest, AnotherInstanceLeavesForeignMarksAlone) {
  Node* x = b_.input("x");
  Node* d = b_.call("truediv", "_operator.truediv", {x, 4.0});
  b_.output(d);
  apply();
  // A second instance with another signature sees a multiplication: nothing to do or undo.
  PassResult other = run_pass(pass_, program_, log_, ops_, "Other()", /*reverse=*/true);
  EXPECT_TRUE(other.changed.empty());
  EXPECT_TRUE(is_marked(*d, kSig));
}

}  // namespace
}  // namespace fxopt
