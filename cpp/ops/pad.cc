#include "ops/pad.h"

#include <algorithm>
#include <array>

namespace fxopt {
namespace {

const std::array<Symbol, 4>& pad_targets() {
  static const std::array<Symbol, 4> targets = {
      Symbol::intern("torch._C._nn.pad"), Symbol::intern("torch.nn.functional.pad"),
      Symbol::intern("aten.constant_pad_nd.default"), Symbol::intern("aten.pad.default")};
  return targets;
}

}  // namespace

std::vector<Trigger> pad_triggers() {
  std::vector<Trigger> triggers;
  for (Symbol target : pad_targets()) triggers.push_back({NodeKind::CallFunction, target});
  return triggers;
}

std::optional<ZeroPad> as_zero_pad(const Node& node, std::string* why_not) {
  if (node.kind() != NodeKind::CallFunction ||
      std::ranges::find(pad_targets(), node.target()) == pad_targets().end()) {
    *why_not = "is not a padding";
    return std::nullopt;
  }
  bool constant_nd = node.target() == pad_targets()[2];
  // constant_pad_nd(self, pad, value); the others (input / self, pad, mode, value).
  if (!constant_nd) {
    const Arg* mode = node.input(2, "mode");
    if (mode && !mode->is_none() && *mode != Arg("constant")) {
      *why_not = "its mode is not constant";
      return std::nullopt;
    }
  }
  const Arg* value = node.input(constant_nd ? 2 : 3, "value");
  if (value && !value->is_none() && value->number() != 0.0) {
    *why_not = "it pads with a value other than zero";
    return std::nullopt;
  }
  const Arg* input =
      node.input(0, constant_nd || node.target() == pad_targets()[3] ? "self" : "input");
  const Arg* widths = node.input(1, "pad");
  const std::vector<Arg>* items = widths ? widths->sequence() : nullptr;
  if (!input || !input->node() || !items || items->size() % 2) {
    *why_not = "its input or widths are not a tensor and a list of pairs";
    return std::nullopt;
  }
  ZeroPad pad{input->node(), {}};
  for (const Arg& item : *items) {
    std::optional<int64_t> width = item.integer();
    if (!width || *width < 0) {
      *why_not = "its widths are not constant non-negative integers";
      return std::nullopt;
    }
    pad.widths.push_back(*width);
  }
  return pad;
}

}  // namespace fxopt
