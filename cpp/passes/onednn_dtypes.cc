#include "passes/onednn_dtypes.h"

#include <algorithm>
#include <stdexcept>

namespace fxopt {

std::vector<std::string> onednn_dtypes_option(const Dict& options) {
  const Arg* dtypes = options.find("dtypes");
  const std::vector<Arg>* items = dtypes ? dtypes->sequence() : nullptr;
  if (!items) throw std::invalid_argument("option 'dtypes' must be a list of dtype names");
  std::vector<std::string> names;
  for (const Arg& item : *items) {
    if (!item.is<std::string>())
      throw std::invalid_argument("option 'dtypes' must be a list of dtype names");
    names.push_back(item.as<std::string>());
  }
  return names;
}

std::optional<std::string> onednn_refusal(const std::vector<std::string>& dtypes,
                                          const std::string& dtype, const std::string& device,
                                          const std::string& what) {
  if (dtypes.empty())
    return what +
           " is not available: this torch lacks torch.ops.mkldnn's pointwise ops, or "
           "oneDNN is disabled";
  if (std::ranges::find(dtypes, dtype) == dtypes.end()) {
    std::string listed;
    for (const std::string& n : dtypes) listed += (listed.empty() ? "" : ", ") + n;
    return "its weight is " + dtype + "; " + what + " runs " + listed + " here";
  }
  if (device != "cpu") return "its weight is on " + device + "; " + what + " is CPU-only";
  return std::nullopt;
}

}  // namespace fxopt
