// Reading torch.fx nodes from C++: attribute names interned once, and a walk of a graph's node
// list. Shared by everything in the bindings that reads fx nodes natively (import, the
// fingerprint, the generated source).
#pragma once

#include <nanobind/nanobind.h>

#include <string>

namespace fxopt::bindings {

namespace nb = nanobind;

// Attribute and metadata names looked up on every fx node (`interned`).
struct NodeKeys {
  nb::handle op, target, name, args, kwargs, meta, next, type, marks, reversal, val, tensor_meta,
      is_wrapped, shape, dtype, device, layout, graph, nodes;
};
const NodeKeys& node_keys();

// The interned Python string `text`, never released: names looked up natively must outlive every
// session, and static objects would be released after Python is finalized.
nb::handle interned(const char* text);

// torch's name of a dtype without the "torch." prefix ("float32"), named once per dtype.
const std::string& dtype_name(nb::handle dtype);

// getattr(object, key), raising Python's error.
nb::object get(nb::handle object, nb::handle key);
// dict[key], or a null object when absent.
nb::object lookup(nb::handle dict, nb::handle key);

// Calls `visit(node)` for each node of the fx graph whose sentinel is `root`, in order.
template <class F>
void for_each_fx_node(nb::handle root, F&& visit) {
  const nb::handle next = node_keys().next;
  for (nb::object node = get(root, next); !node.is(root); node = get(node, next)) visit(node);
}

}  // namespace fxopt::bindings
