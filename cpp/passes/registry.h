// The table of built-in transformations, by the class name Python uses for them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewrite/pass.h"

namespace fxopt {

struct PassInfo {
  std::string name;     // the fxopt.optimization class name
  std::string summary;  // one line, shown by `fxopt passes`
  // Outputs stay the same up to float rounding; Python's classes read it from here. (Every
  // built-in pass is reversible, so that needs no column.)
  bool preserves_computation;
  // Builds the pass from its parameters (the Python constructor's keyword arguments).
  std::function<std::unique_ptr<Pass>(const Dict& options)> make;
};

const std::vector<PassInfo>& all_passes();
// nullptr if no built-in pass has this name.
const PassInfo* find_pass(std::string_view name);

}  // namespace fxopt
