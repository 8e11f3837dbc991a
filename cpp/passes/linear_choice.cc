#include "passes/linear_choice.h"

namespace fxopt {

ChoiceQuery linear_choice_query(const LinearView& view, std::string op, std::string variant,
                                std::vector<std::string> candidates, size_t fallback) {
  const std::vector<int64_t>& sizes = view.input->shape();
  int64_t tokens = sizes.empty() ? -1 : 1;
  for (size_t d = 0; d + 1 < sizes.size() && tokens != -1; ++d)
    tokens = sizes[d] < 0 ? -1 : tokens * sizes[d];
  return ChoiceQuery{std::move(op),
                     {tokens, view.in_features, view.out_features},
                     view.dtype(),
                     std::move(variant),
                     view.input->name(),
                     std::move(candidates),
                     fallback};
}

}  // namespace fxopt
