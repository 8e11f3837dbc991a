// The activations fxopt's convolution kernels take in as a clamp of their sums (ReLU: [0, inf),
// ReLU6: [0, 6]), as the bounds their Python call is given (None: unbounded).
#pragma once

#include <optional>
#include <string>

#include "ir/arg.h"

namespace fxopt {

struct Clamp {
  Arg lower, upper;
};

// The clamp equal to the activation ops/activation.h names `activation`; nullopt for others.
inline std::optional<Clamp> clamp_of(const std::string& activation) {
  if (activation == "relu") return Clamp{0.0, None{}};
  if (activation == "relu6") return Clamp{0.0, 6.0};
  return std::nullopt;
}

}  // namespace fxopt
