// torch.fx's `Graph.lint()` checks, proved natively in one walk of the node list.
//
// A lint of a 100k-node graph took longer in Python than generating its code. This only proves
// a graph well formed: where any check fails or cannot be made, it answers false and the caller
// runs torch's own lint, which raises fx's exact error (or passes, where this was stricter).
// It reads fx internals (`_input_nodes`, `_find_nodes_lookup_table`), so the caller uses it only
// on the torch versions it was checked against.
#pragma once

#include <nanobind/nanobind.h>

namespace fxopt::bindings {

namespace nb = nanobind;

// True if `graph.lint()` would pass; `module_type`: torch.nn.Module.
bool fx_graph_lints_clean(nb::handle graph, nb::handle module_type);

}  // namespace fxopt::bindings
