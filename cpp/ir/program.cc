#include "ir/program.h"

namespace fxopt {

const TensorInfo* ModuleInfo::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const ModuleInfo* Program::module(Symbol path) const {
  auto it = modules.find(path.str());
  return it == modules.end() ? nullptr : &it->second;
}

const TensorInfo* Program::attribute(Symbol path) const {
  const std::string& name = path.str();
  if (auto it = attributes.find(name); it != attributes.end()) return &it->second;
  // A parameter or buffer of a submodule the graph calls, which a pass of this run read with a
  // get_attr of its own (a Linear module fused into one call reads its weight so).
  size_t dot = name.rfind('.');
  if (dot == std::string::npos) return nullptr;
  auto owner = modules.find(name.substr(0, dot));
  if (owner == modules.end()) return nullptr;
  const TensorInfo* tensor = owner->second.tensor(name.substr(dot + 1));
  return tensor && tensor->present() ? tensor : nullptr;
}

std::string Program::unique_path(const std::string& base) {
  std::string candidate = base;
  for (int i = 1; taken_paths.contains(candidate); ++i) candidate = base + "_" + std::to_string(i);
  taken_paths.insert(candidate);
  return candidate;
}

std::string_view Program::dtype_of(const Arg& value) const {
  if (!value.is<Opaque>()) return {};
  auto it = dtype_opaques.find(value.as<Opaque>().id);
  return it == dtype_opaques.end() ? std::string_view() : std::string_view(it->second);
}

}  // namespace fxopt
