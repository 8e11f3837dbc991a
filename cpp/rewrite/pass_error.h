// The one error a pass raises: it aborts the whole pass, names the node, and the bridge then
// leaves the GraphModule untouched.
#pragma once

#include <stdexcept>
#include <string>

#include "ir/node.h"

namespace fxopt {

class PassError : public std::runtime_error {
 public:
  PassError(const Node& node, const std::string& reason)
      : std::runtime_error("node '" + node.name() + "': " + reason), node_(node.name()) {}
  const std::string& node() const { return node_; }

 private:
  std::string node_;
};

}  // namespace fxopt
