// The modules of a GraphModule as a session last saw them, taken and compared in one native walk.
//
// A session kept on a graph between transformations may be reused only if nothing replaced what
// it imported from the modules: no module added, removed, renamed or replaced, no parameter or
// buffer replaced, no plain attribute it read changed (`training` flips on `gm.eval()`). The walk
// lists, in named_modules() order, every module with the key its parent files it under, its
// parameter and buffer names and tensors and, for the modules the session imported, the values
// of the attributes it read; then the value at each path get_attr nodes read, found as
// `fxopt.engine.bridge._lookup` finds it (None where nothing is there). Two walks match when they list the same objects, by identity
// (holding them keeps their addresses from being reused). In Python this walk was most of a
// second transformation's cost on an unchanged graph.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace fxopt::bindings {

namespace nb = nanobind;

// getattr(object, name), or null where it has no such attribute, reading a module's tables
// directly as `fxopt.engine.bridge._child` does: nn.Module finds them only in its Python
// __getattr__, after a failed lookup. `module_type`: torch.nn.Module.
nb::object module_attribute(nb::handle object, nb::handle name, nb::handle module_type);

class ModuleFingerprint {
 public:
  // `imported`: paths of the modules whose attributes the session read; `attributes`: their
  // names (the same for every module); `paths`: dotted paths the graph reads (get_attr);
  // `module_type`: torch.nn.Module, whose instances' tables are read directly on those paths.
  void take(nb::handle root, const std::unordered_set<std::string>& imported,
            std::vector<std::string> attributes, const std::vector<std::string>& paths,
            nb::handle module_type);
  // True if a walk of `root` now lists the same objects as the last `take`.
  bool matches(nb::handle root) const;
  // The tensors the modules held and the values at the paths at the last `take`: what a kept
  // session must not forget.
  nb::list tensors() const;

  int traverse(visitproc visit, void* arg) const;
  void clear() {
    objects_.clear();
    tensors_.clear();
    module_type_.reset();
  }

 private:
  std::vector<nb::object> walk(nb::handle root, std::vector<size_t>& tensors) const;
  // The object at `path` below `root`, or None.
  nb::object find(nb::handle root, const std::vector<nb::object>& path) const;

  std::unordered_set<std::string> imported_;
  std::vector<nb::object> attributes_;          // interned names
  std::vector<std::vector<nb::object>> paths_;  // interned names, one per dotted part
  nb::object module_type_;
  std::vector<nb::object> objects_;
  std::vector<size_t> tensors_;  // positions in objects_ of the tensors the modules hold
};

}  // namespace fxopt::bindings
