// The weight dtypes a oneDNN fused op may run here: decided in Python, where torch is (float32
// where the op exists and oneDNN is enabled, bfloat16 where the CPU runs it natively), and
// passed to the passes that emit such ops as the option {"dtypes": [name, ...]}.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"

namespace fxopt {

// The option's dtype names; throws std::invalid_argument if malformed.
std::vector<std::string> onednn_dtypes_option(const Dict& options);
// Why an op whose weight has `dtype` on `device` cannot become `what` ("oneDNN's fused
// linear"), or nullopt if it can.
std::optional<std::string> onednn_refusal(const std::vector<std::string>& dtypes,
                                          const std::string& dtype, const std::string& device,
                                          const std::string& what);

}  // namespace fxopt
