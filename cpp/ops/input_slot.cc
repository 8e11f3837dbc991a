#include "ops/input_slot.h"

namespace fxopt {

const Arg& InputSlot::read(const Node& node) const {
  return positional ? node.args().at(index) : *node.kwargs().find(keyword);
}

std::pair<Args, Kwargs> InputSlot::write(const Node& node, Arg value) const {
  Args args = node.args();
  Kwargs kwargs = node.kwargs();
  if (positional) args.at(index) = std::move(value);
  else kwargs.set(keyword, std::move(value));
  return {std::move(args), std::move(kwargs)};
}

std::optional<InputSlot> find_slot(const Node& node, size_t index, std::string_view keyword) {
  if (index < node.args().size()) return InputSlot{index, std::string(keyword), true};
  if (node.kwargs().find(keyword)) return InputSlot{index, std::string(keyword), false};
  return std::nullopt;
}

}  // namespace fxopt
