#include "passes/registry.h"

#include "passes/change_activation.h"
#include "passes/change_precision.h"
#include "passes/change_true_div_to_mul_by_inverse.h"
#include "passes/choose_attention_kernel.h"
#include "passes/conv_weights_channels_last.h"
#include "passes/eliminate_common_subexpressions.h"
#include "passes/eliminate_dead_code.h"
#include "passes/fold_constants.h"
#include "passes/fold_pad_in_conv.h"
#include "passes/fuse_attention_to_sdpa.h"
#include "passes/fuse_batch_norm_in_conv.h"
#include "passes/fuse_batch_norm_in_linear.h"
#include "passes/fuse_bias_in_linear.h"
#include "passes/fuse_conv_activation_onednn.h"
#include "passes/fuse_depthwise_conv.h"
#include "passes/fuse_linear_activation_onednn.h"
#include "passes/fuse_pointwise_conv.h"
#include "passes/fuse_tanh_gelu.h"
#include "passes/merge_linears.h"
#include "passes/move_activation_before_reshape.h"
#include "passes/pass_options.h"
#include "passes/quantize_convs_int8.h"
#include "passes/quantize_linears_int8.h"
#include "passes/quantize_linears_weight_only.h"
#include "passes/recognize_linears.h"
#include "passes/remove_no_ops.h"
#include "passes/remove_runtime_asserts.h"
#include "passes/smooth_linear_inputs.h"

namespace fxopt {
namespace {

template <class P>
std::unique_ptr<Pass> make_plain(const Dict&) {
  return std::make_unique<P>();
}

}  // namespace

// Order matters only for presets and `fxopt passes`: folding passes come before merging ones,
// so a merged Linear never hides a BatchNorm that could have been folded into its members;
// passes that change the computation (ChangeActivation, ChangePrecision) come late.
// RecognizeLinears comes before the Linear passes, so they see the Linears it finds;
// FuseLinearActivationOneDnn, FuseConvActivationOneDnn and the int8 passes last, as the Linears they consume are no
// Linears to the others.
// The graph cleanups come first: pattern passes then see through no-ops and repeated
// subexpressions; constants fold after CSE (one fold per distinct expression); dead code after
// them takes what they left unused.
const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
      {"RemoveNoOps",
       "calls that return their input unchanged (eval dropout, identity, same-dtype casts, "
       "same-shape views, unneeded clones) go",
       true, make_plain<RemoveNoOps>},
      {"EliminateCommonSubexpressions",
       "a call repeating an earlier one with the same arguments is replaced by its result", true,
       make_plain<EliminateCommonSubexpressions>},
      {"FoldConstants",
       "a call whose value depends only on stored tensors and literals is computed once and "
       "stored",
       true, make_plain<FoldConstants>},
      {"EliminateDeadCode", "nodes whose value nothing reads and that have no side effect go", true,
       make_plain<EliminateDeadCode>},
      {"RemoveRuntimeAsserts",
       "torch.export's runtime checks go, with the values only they read (opt-in: no checks)", true,
       make_plain<RemoveRuntimeAsserts>},
      {"ChangeTrueDivToMulByInverse",
       "division by a constant becomes multiplication by its inverse", true,
       make_plain<ChangeTrueDivToMulByInverse>},
      {"RecognizeLinears",
       "matrix products with stored weights (addmm, mm / matmul + bias) become Linears", true,
       make_plain<RecognizeLinears>},
      {"FuseBatchNorm2dInConv2d", "an eval-mode BatchNorm2d after a Conv2d folds into its weights",
       true, [](const Dict&) { return std::make_unique<FuseBatchNormInConv>(true); }},
      {"FuseBatchNormInConv",
       "an eval-mode batch norm after any (transposed) convolution folds into its weights", true,
       [](const Dict&) { return std::make_unique<FuseBatchNormInConv>(false); }},
      {"FoldPadInConv",
       "a zero padding read only by a convolution becomes the convolution's own padding", true,
       make_plain<FoldPadInConv>},
      {"ConvWeightsChannelsLast",
       "2-D convolution weights are stored channels-last, so oneDNN runs the network in NHWC", true,
       make_plain<ConvWeightsChannelsLast>},
      {"FuseBatchNorm1dInLinear",
       "an eval-mode BatchNorm1d before or after a Linear folds into its weights", true,
       make_plain<FuseBatchNorm1dInLinear>},
      {"MergeLinears", "Linears reading the same input become one Linear whose output is sliced",
       true, make_plain<MergeLinears>},
      {"FuseBiasInLinear", "a Linear's bias becomes a weight column read against a ones column",
       true, make_plain<FuseBiasInLinear>},
      {"FuseAttentionToSdpa",
       "matmul, scale, mask, softmax, (eval) dropout, matmul become one "
       "scaled_dot_product_attention",
       true, make_plain<FuseAttentionToSdpa>},
      {"FuseTanhGelu",
       "GELU's tanh approximation written out in elementwise ops (gelu_new) becomes one gelu "
       "call",
       true, make_plain<FuseTanhGelu>},
      {"MoveActivationBeforeReshape",
       "an activation reading a reshape of a Linear's result runs before the reshape, right "
       "after the Linear",
       true, make_plain<MoveActivationBeforeReshape>},
      {"ChangeActivation", "every activation of one kind becomes another (source -> target)", false,
       [](const Dict& o) {
         return std::make_unique<ChangeActivation>(string_option(o, "source"),
                                                   string_option(o, "target"));
       }},
      {"ChangePrecision",
       "Linear, convolution and matmul run in float16 / bfloat16; other values keep their dtype",
       false,
       [](const Dict& o) {
         const Arg* dtype_object = o.find("dtype_object");
         if (!dtype_object) throw std::invalid_argument("option 'dtype_object' is missing");
         const Arg* full = o.find("full_dtype_objects");
         return std::make_unique<ChangePrecision>(
             string_option(o, "dtype"), *dtype_object,
             full && full->is<Dict>() ? full->as<Dict>() : Dict{});
       }},
      {"ChooseAttentionKernel",
       "a bfloat16 scaled_dot_product_attention runs fxopt's AVX512-BF16 attention kernel where "
       "that measured faster (CPU)",
       false, make_plain<ChooseAttentionKernel>},
      {"SmoothLinearInputs",
       "a Linear's input is divided per channel by factors its weight's columns are multiplied "
       "by (SmoothQuant; for int8 activations)",
       true, SmoothLinearInputs::from_options},
      {"FuseDepthwiseConv",
       "a depthwise convolution, with the zero pad before it and a ReLU / ReLU6 after it, runs "
       "fxopt's channels-last kernel where that measured faster (CPU)",
       true, make_plain<FuseDepthwiseConv>},
      {"FusePointwiseConv",
       "a 1x1 convolution, with a residual add and a ReLU / ReLU6 after it, runs fxopt's "
       "channels-last kernel where that measured faster (CPU)",
       true, make_plain<FusePointwiseConv>},
      {"FuseLinearActivationOneDnn",
       "a Linear and the activation after it become one oneDNN fused linear (CPU, plain weights)",
       true, FuseLinearActivationOneDnn::from_options},
      {"FuseConvActivationOneDnn",
       "a 2-D convolution, a residual add and an activation after it become one oneDNN "
       "convolution on a weight packed once (CPU)",
       true, FuseConvActivationOneDnn::from_options},
      {"QuantizeLinearsInt8",
       "float32 Linears become int8 matrix products with activations quantized at run time "
       "(per-token chain or torch's packed int8 GEMMs, measured; opt-in, CPU)",
       false, QuantizeLinearsInt8::from_options},
      {"QuantizeConvsInt8",
       "float32 2-D convolutions become oneDNN int8 convolutions on activations quantized with "
       "calibrated scales (the residual add and activation after them fused; opt-in, CPU)",
       false, QuantizeConvsInt8::from_options},
      {"QuantizeLinearsWeightOnly",
       "float32 Linears read an int8 copy of their weight (per-channel scales) through ATen's "
       "weight-only kernel; activations stay float (opt-in, CPU)",
       false, QuantizeLinearsWeightOnly::from_options},
  };
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& info : all_passes())
    if (info.name == name) return &info;
  return nullptr;
}

}  // namespace fxopt
