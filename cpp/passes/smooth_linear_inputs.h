// SmoothLinearInputs: a Linear's input is divided per channel by a factor its weight's columns
// are multiplied by (computation-preserving up to float rounding).
//
//   before:  %y  = linear(%x, W, b)
//   after:   %xs = aten.mul.Tensor(%x, %inverse)     (inverse = 1 / s, [K], stored next to W)
//            %y  = linear(%xs, W * s, b)             (W * s[None, :]: a copy, as replace_params
//                                                     stores it; the original stays registered)
//
// linear(x / s, W * s, b) = linear(x, W, b). Why (SmoothQuant): int8 kernels that quantize
// activations with one scale per tensor (torch's packed GEMMs) flatten every channel to the
// few outlier channels a model's activations have (4-23x the median channel's range in
// all-MiniLM-L6-v2's FFN inputs); dividing those channels by s moves their range into the
// weight, which is quantized per output channel. The factor stays an explicit multiply: folding
// it into the producer is exact only where every user of the value would see the same factor,
// which in BERT (the LayerNorm after the residual add feeds Q, K, V and the residual) it is not.
//
// Options: "factors" ({Linear node name: [s_0, ..., s_{K-1}]}, positive and finite; the Python
// side computes them from a calibration run: s_j = max|x_j|^alpha / max|W[:, j]|^(1 - alpha)).
// Linears without factors are left alone; skipped, with the reason: factors of the wrong length
// or not positive and finite, a weight that is not float32.
// Reverse points the Linear back at its input and its original weight (bit for bit) and removes
// the multiply and the stored inverse.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

class SmoothLinearInputs final : public Pass {
 public:
  explicit SmoothLinearInputs(std::map<std::string, std::vector<double>> factors);
  // From the options {"factors": {name: [float, ...]}}; throws std::invalid_argument if
  // malformed.
  static std::unique_ptr<Pass> from_options(const Dict& options);
  std::vector<Trigger> triggers() const override;
  void rewrite(PassContext& ctx, Node* candidate) const override;
  void restore(PassContext& ctx, Node* node, const RecordReader& record) const override;

 private:
  std::map<std::string, std::vector<double>> factors_;
};

}  // namespace fxopt
