#include "ops/tied_tensors.h"

#include <algorithm>

namespace fxopt {

TiedTensors::TiedTensors(const Program& program) {
  for (const auto& [path, module] : program.modules)
    for (const auto& [name, tensor] : module.tensors)
      if (tensor.present()) paths_[tensor.handle].push_back(path + "." + name);
  for (const auto& [path, tensor] : program.attributes)
    if (tensor.present()) paths_[tensor.handle].push_back(path);
}

std::vector<std::string> TiedTensors::others(const TensorInfo& tensor,
                                             const std::string& path) const {
  auto it = paths_.find(tensor.handle);
  if (!tensor.present() || it == paths_.end()) return {};
  std::vector<std::string> out;
  for (const std::string& p : it->second)
    if (p != path) out.push_back(p);
  std::sort(out.begin(), out.end());  // a module tensor may be listed as an attribute too
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const TensorInfo* stored_tensor(const Program& program, const std::string& path) {
  // A module's own table first: a reverse session also registers every parameter path as an
  // attribute, which a module replaced since (Rewriter::set_module) leaves behind.
  size_t dot = path.rfind('.');
  const ModuleInfo* module =
      dot == std::string::npos ? nullptr : program.module(Symbol::intern(path.substr(0, dot)));
  if (module) return module->tensor(path.substr(dot + 1));
  return program.attribute(Symbol::intern(path));
}

TensorInfo tied_tensor(const Program& program, const std::vector<std::string>& tied_paths,
                       const TensorInfo& computed) {
  for (const std::string& path : tied_paths) {
    const TensorInfo* t = stored_tensor(program, path);
    if (t && t->present() && t->shape == computed.shape && t->dtype == computed.dtype &&
        t->device == computed.device && t->requires_grad == computed.requires_grad &&
        t->is_parameter == computed.is_parameter)
      return *t;
  }
  return computed;
}

}  // namespace fxopt
