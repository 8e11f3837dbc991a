// QuantizeConvsInt8: a float32 2-D convolution becomes oneDNN's int8 convolution on activations
// quantized with a scale and zero point calibrated on real inputs (static quantization; opt-in,
// not computation-preserving). The residual add and the activation that read only its result
// run in the same call, as in FuseConvActivationOneDnn:
//
//   before:  %c = conv2d(%x, %w, %b, stride, padding, dilation, groups)
//            %s = add(%c, %r)            (optional)
//            %y = relu(%s)               (optional; without an add also relu6, hardswish, silu)
//   after:   %y = fxopt.runtime.static_int8_conv.int8_conv2d(%x, %w_int8, %w_int8_scale, %b,
//                     stride, padding, dilation, groups, x_scale, x_zero_point, %r,
//                     "relu", [], None, residual_dies, kernel)
//
// with w_scale = max |W[o]| / 127 per output channel and w_int8 = round(W / w_scale) (shape of
// W), computed once (TensorOps::quantize_rows_int8) and stored next to the weight
// (`<weight path>_int8`, `<weight path>_int8_scale`); the original weight stays, so reverse is
// exact. The call quantizes x to uint8 (kernels/quantize_u8.h), runs oneDNN's u8 x s8 kernels
// on a weight it packs once (packing.py), and returns x's dtype: a lowering that follows
// (ChangePrecision) leaves it in bfloat16, its scales and bias in float32 (ops/dtype_flow.h).
// oneDNN's int8 convolution adds a residual in place (its sum post-op; it has no binary add),
// so the call copies the residual first, unless `residual_dies`: the residual is a tensor of
// its own (ops/effects.h fresh_result) that nothing reads after the add, and no reader before
// it made a view of it, as with a ResNet block's input (read by the block's first convolution,
// then by the add). The call then counts as mutating it (is_mutating), so the cleanups that
// run later never give that value another reader (written_in_place).
//
// Why: int8 convolutions ran 1.4-1.8x faster than oneDNN's bfloat16 ones at ResNet-50's sizes
// on a Zen 4 (VNNI; one thread, batch 1), and per-tensor activation scales are enough for
// convolutions (ResNet-50 with all 53 in int8: cosine 0.99986 against float32), unlike the
// Linears of transformers, whose outlier tokens need per-token scales computed at run time.
// The scales come from a calibration run (fxopt.optimization.QuantizeConvsInt8), which also
// keeps the most sensitive convolutions in float where the outputs would leave a cosine bound.
//
// Options: "input_scales" ({node name: [scale, zero point]}: the calibrated quantization of
// each convolution's input; convolutions without one are skipped), "compare_with" ("float32"
// or "bfloat16": the precision a convolution left as it is will run in, timed against) and
// "choose_only" (true: skip every convolution once its kernel is chosen, what calibration asks
// before it has scales). Kernel choice (tuning/chooser.h), per convolution: the float one
// ("float32" / "bfloat16", oneDNN's fused convolution as FuseConvActivationOneDnn makes it),
// "int8_onednn", the static fallback, and for a 1x1 convolution of stride 1 with no activation,
// ReLU or ReLU6, "int8_fxopt": the same call with kernel "fxopt", fxopt's int8 kernel
// (kernels/int8_pointwise_conv.h: at batch 1 it has a few microseconds around its work where
// oneDNN's call through torch has 25-35). Skipped, with the reason: what
// FuseConvActivationOneDnn skips (passes/conv_fusion.h), weights not float32 or not on the CPU,
// bad scales.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "rewrite/pass.h"

namespace fxopt {

struct InputQuantization {
  double scale = 1.0;
  int64_t zero_point = 0;
};

class QuantizeConvsInt8 final : public Pass {
 public:
  QuantizeConvsInt8(std::map<std::string, InputQuantization> input_scales,
                    std::string compare_with = "float32", bool choose_only = false);
  // From the options {"input_scales": {name: [scale, zero point]}, "compare_with": dtype,
  // "choose_only": bool}; throws std::invalid_argument if malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::map<std::string, InputQuantization> input_scales_;
  std::string compare_with_;
  bool choose_only_;
};

}  // namespace fxopt
