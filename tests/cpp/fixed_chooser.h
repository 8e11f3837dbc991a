// A kernel chooser for tests: its answers are fixed, its queries kept.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tuning/chooser.h"

namespace fxopt::testing {

// Picks the first of its names that is a candidate (none: an out-of-range index) and keeps
// every query it got.
class FixedChooser final : public Chooser {
 public:
  explicit FixedChooser(std::vector<std::string> picks) : picks_(std::move(picks)) {}
  explicit FixedChooser(std::string pick) : FixedChooser(std::vector<std::string>{pick}) {}
  KernelChoice choose(const ChoiceQuery& query) override {
    queries.push_back(query);
    for (const std::string& pick : picks_)
      for (size_t i = 0; i < query.candidates.size(); ++i)
        if (query.candidates[i] == pick) return {i, 0.5, "fixed"};
    return {query.candidates.size(), 1.0, "out of range"};
  }
  std::vector<ChoiceQuery> queries;

 private:
  std::vector<std::string> picks_;
};

}  // namespace fxopt::testing
