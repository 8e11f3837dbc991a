#include "passes/registry.h"

#include "passes/change_true_div_to_mul_by_inverse.h"

namespace fxopt {
namespace {

template <class P>
std::unique_ptr<Pass> make_plain(const Dict&) {
  return std::make_unique<P>();
}

}  // namespace

// Order matters only for presets and `fxopt passes`: folding passes come before merging ones,
// so a merged Linear never hides a BatchNorm that could have been folded into its members.
const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = {
      {"ChangeTrueDivToMulByInverse", "division by a constant becomes multiplication by its inverse",
       true, true, make_plain<ChangeTrueDivToMulByInverse>},
  };
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& info : all_passes())
    if (info.name == name) return &info;
  return nullptr;
}

}  // namespace fxopt
