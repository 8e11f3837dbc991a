#include "ops/input_slot.h"

namespace fxopt {

const Arg& InputSlot::read(const Node& node) const {
  return positional ? node.args().at(index) : *node.kwargs().find(keyword);
}

std::pair<Args, Kwargs> InputSlot::write(const Node& node, Arg value) const {
  Args args = node.args();
  Kwargs kwargs = node.kwargs();
  if (positional)
    args.at(index) = std::move(value);
  else
    kwargs.set(keyword, std::move(value));
  return {std::move(args), std::move(kwargs)};
}

std::optional<InputSlot> find_slot(const Node& node, size_t index, std::string_view keyword) {
  if (index < node.args().size()) return InputSlot{index, std::string(keyword), true};
  if (node.kwargs().find(keyword)) return InputSlot{index, std::string(keyword), false};
  return std::nullopt;
}

std::pair<Args, Kwargs> with_operand(const Node& node, size_t index, std::string_view keyword,
                                     std::optional<Arg> value) {
  Args args = node.args();
  Kwargs kwargs = node.kwargs();
  if (index < args.size()) {
    if (value)
      args[index] = std::move(*value);
    else if (index + 1 == args.size())
      args.pop_back();
    else
      args[index] = None{};  // a later positional operand keeps its place
  } else if (!value) {
    kwargs.erase(keyword);
  } else if (index == args.size() && !kwargs.find(keyword)) {
    args.push_back(std::move(*value));
  } else {
    kwargs.set(keyword, std::move(*value));
  }
  return {std::move(args), std::move(kwargs)};
}

}  // namespace fxopt
