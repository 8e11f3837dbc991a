// Reading the plain values a driver record stores (removals, placements), failing one way:
// std::invalid_argument naming the record and the value that does not fit, which the driver
// turns into a PassError naming the node.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/arg.h"

namespace fxopt {

class RecordFields {
 public:
  explicit constexpr RecordFields(std::string_view record) : record_(record) {}

  [[noreturn]] void malformed(const Arg& value) const;
  // The items of a tuple or list value; exactly `size` of them unless `size` is 0.
  const std::vector<Arg>& items(const Arg& value, size_t size = 0) const;
  const std::string& text(const Arg& value) const;

 private:
  std::string_view record_;
};

}  // namespace fxopt
