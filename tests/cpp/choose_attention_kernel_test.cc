#include "passes/choose_attention_kernel.h"

#include <gtest/gtest.h>

#include "fixed_chooser.h"
#include "norm_fixtures.h"
#include "ops/value_dtype.h"
#include "passes/change_precision.h"

namespace fxopt {
namespace {

const std::string kSig = "ChooseAttentionKernel-test";
const char* kSdpa = "torch._C._nn.scaled_dot_product_attention";
const char* kKernel = "fxopt.runtime.prefill_attention.attention_bf16";
const char* kFloatKernel = "fxopt.runtime.prefill_attention.attention_f32";
const char* kKeptAten =
    "the kernel choice kept ATen's scaled_dot_product_attention here (see the pass's choices: "
    "measured faster, pinned, or the only kernel this CPU runs)";

class ChooseAttentionKernelTest : public ::testing::Test, protected testing::NormFixture {
 protected:
  // x -> Linear (a stored weight) -> view as [1, heads, rows, d] q, k and v -> attention.
  Node* attention(const std::string& name, Node* x, int64_t d, Kwargs kwargs = {}) {
    attribute(name + ".weight", {4 * d, 4 * d});
    Node* w = b.attr(name + "_weight", name + ".weight");
    Node* fc = b.call(name + "_linear", "torch._C._nn.linear", {x, w});
    Node* heads = b.method(name + "_view", "view", {fc, 1, 4, 8, d});
    for (Node* n : {fc}) program.graph.set_value_info(n, "float32", {8, 4 * d});
    program.graph.set_value_info(heads, "float32", {1, 4, 8, d}, "cpu");
    return b.call(name, kSdpa, {heads, heads, heads}, std::move(kwargs));
  }

  void lower() {
    Dict back;
    back.set("float32", Opaque{9});
    program.dtype_opaques[7] = "bfloat16";
    program.dtype_opaques[9] = "float32";
    run_pass(ChangePrecision("bfloat16", Opaque{7}, back), program, edits, ops, "lowering",
             /*reverse=*/false);
  }

  PassResult apply(bool reverse = false) {
    return run_pass(ChooseAttentionKernel(), program, edits, ops, kSig, reverse);
  }
  PassResult apply(Chooser& chooser, bool reverse = false) {
    return run_pass(ChooseAttentionKernel(), program, edits, ops, kSig, reverse, chooser);
  }
};

TEST_F(ChooseAttentionKernelTest, LoweredAttentionRunsTheKernelAndReverseRestoresIt) {
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {8, 64}, "cpu");
  Node* kept = attention("attn", x, 16);
  Node* odd = attention("odd", x, 24);  // a head size the kernel has no path for
  Kwargs dropout;
  dropout.set("dropout_p", 0.1);
  Node* dropped = attention("dropped", x, 16, dropout);
  b.output(Tuple{{kept, odd, dropped}});

  PassResult unlowered = apply();  // float32 operands: the static choice keeps ATen's call
  EXPECT_TRUE(unlowered.changed.empty());
  ASSERT_EQ(unlowered.skipped.size(), 3u);
  EXPECT_EQ(unlowered.skipped[0].reason, kKeptAten);
  EXPECT_EQ(unlowered.skipped[1].reason, kKeptAten);  // 24: a multiple of 8 for float32
  EXPECT_EQ(unlowered.skipped[2].reason, "it applies dropout");

  lower();
  // fx's facts still say float32; the values are bfloat16 now.
  EXPECT_EQ(kept->args()[0].node()->dtype(), "float32");
  EXPECT_EQ(ValueDtypes(program).of(kept->args()[0].node()), "bfloat16");
  auto before = structure();
  PassResult forward = apply();
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"attn"}));
  ASSERT_EQ(forward.skipped.size(), 2u);
  EXPECT_EQ(forward.skipped[0].reason,
            "its head size is not a known multiple of 16 up to 128 (the bfloat16 kernel's)");
  EXPECT_EQ(forward.skipped[1].reason, "it applies dropout");
  ASSERT_EQ(forward.choices.size(), 1u);
  EXPECT_EQ(forward.choices[0].op, "attention");
  EXPECT_EQ(forward.choices[0].picked, "fxopt_bf16");  // the static fallback
  EXPECT_EQ(kept->target().str(), kKernel);
  EXPECT_EQ(kept->args().size(), 3u);  // operands as they were
  EXPECT_EQ(odd->target().str(), kSdpa);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(/*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"attn"}));
  EXPECT_EQ(structure(), before);
}

TEST_F(ChooseAttentionKernelTest, FloatAttentionRunsTheFloatKernelWhereChosen) {
  Node* x = b.input("x");
  program.graph.set_value_info(x, "float32", {8, 64}, "cpu");
  Node* attn = attention("attn", x, 16);
  Node* wide = attention("wide", x, 24);
  Node* odd = attention("odd", x, 12);  // no multiple of 8
  b.output(Tuple{{attn, wide, odd}});
  auto before = structure();
  testing::FixedChooser chooser("fxopt_f32");
  PassResult forward = apply(chooser);
  EXPECT_EQ(forward.changed, (std::vector<std::string>{"attn", "wide"}));
  ASSERT_EQ(forward.skipped.size(), 1u);
  EXPECT_EQ(forward.skipped[0].reason,
            "its head size is not a known multiple of 8 up to 256 (the float32 kernel's)");
  ASSERT_EQ(chooser.queries.size(), 2u);
  EXPECT_EQ(chooser.queries[0].dtype, "float32");
  EXPECT_EQ(chooser.queries[0].candidates, (std::vector<std::string>{"sdpa", "fxopt_f32"}));
  EXPECT_EQ(chooser.queries[0].fallback, 0u);
  EXPECT_EQ(chooser.queries[0].shape, (std::vector<int64_t>{1, 4, 4, 8, 8, 16}));
  EXPECT_EQ(attn->target().str(), kFloatKernel);
  EXPECT_EQ(wide->target().str(), kFloatKernel);
  EXPECT_EQ(odd->target().str(), kSdpa);
  EXPECT_TRUE(program.graph.lint().empty());

  PassResult backward = apply(chooser, /*reverse=*/true);
  EXPECT_EQ(backward.changed, (std::vector<std::string>{"attn", "wide"}));
  EXPECT_EQ(structure(), before);
}

TEST_F(ChooseAttentionKernelTest, MixedOrOtherDtypesKeepAtensCall) {
  Node* q = b.input("q");
  Node* k = b.input("k");
  program.graph.set_value_info(q, "float16", {1, 4, 8, 16}, "cpu");
  program.graph.set_value_info(k, "float32", {1, 4, 8, 16}, "cpu");
  Node* half = b.call("half", kSdpa, {q, q, q});
  Node* mixed = b.call("mixed", kSdpa, {k, k, q});
  b.output(Tuple{{half, mixed}});
  testing::FixedChooser chooser("fxopt_f32");
  PassResult result = apply(chooser);
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 2u);
  EXPECT_EQ(result.skipped[0].reason,
            "its operands are float16, not all bfloat16 or all float32 (the kernels' dtypes)");
  EXPECT_EQ(result.skipped[1].reason,
            "its operands are float32, not all bfloat16 or all float32 (the kernels' dtypes)");
}

TEST_F(ChooseAttentionKernelTest, AnAtenGraphKeepsAtensCall) {
  Node* q = b.input("q");
  program.graph.set_value_info(q, "bfloat16", {1, 4, 8, 16}, "cpu");
  Node* sdpa = b.call("sdpa", "aten.scaled_dot_product_attention.default", {q, q, q});
  b.output(sdpa);
  PassResult result = apply();
  EXPECT_TRUE(result.changed.empty());
  ASSERT_EQ(result.skipped.size(), 1u);
  EXPECT_EQ(result.skipped[0].reason, "an ATen graph (torch.export's) holds ATen ops only");
}

TEST_F(ChooseAttentionKernelTest, ValueDtypesFollowStoredTensorsCastsAndPromotion) {
  attribute("w", {4, 4}, "bfloat16");
  Node* x = b.input("x");
  Node* ids = b.input("ids");
  Node* w = b.attr("w", "w");
  Node* fc = b.call("linear", "torch._C._nn.linear", {x, w});
  Node* t = b.method("t", "transpose", {fc, 0, 1});
  Node* up = b.method("up", "to", {t, Opaque{9}});
  Node* mixed = b.call("add", "_operator.add", {up, t});
  Node* eq = b.call("eq", "_operator.eq", {ids, 1});
  b.output(Tuple{{mixed, eq}});
  program.dtype_opaques[9] = "float32";
  program.graph.set_value_info(x, "bfloat16", {4, 4});
  program.graph.set_value_info(ids, "int64", {4});
  for (Node* n : {fc, t, up, mixed}) program.graph.set_value_info(n, "float32", {4, 4});
  program.graph.set_value_info(eq, "bool", {4});
  ValueDtypes dtypes(program);
  EXPECT_EQ(dtypes.of(w), "bfloat16");
  EXPECT_EQ(dtypes.of(fc), "bfloat16");
  EXPECT_EQ(dtypes.of(t), "bfloat16");
  EXPECT_EQ(dtypes.of(up), "float32");     // the cast names it
  EXPECT_EQ(dtypes.of(mixed), "float32");  // promoted
  EXPECT_EQ(dtypes.of(eq), "bool");
}

}  // namespace
}  // namespace fxopt
