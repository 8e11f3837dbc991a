// The record of every edit a pass made to the core program, in order.
//
// The bridge replays it onto the fx.GraphModule once a pass (or a whole composition) succeeded,
// so the user's module is touched only after the core work is complete, and only where it
// changed. Nodes are named by id; node references inside arguments stay Node* and are resolved
// by id at replay time, when every node they can name has been created.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/program.h"

namespace fxopt {

struct Edit {
  enum class Kind : uint8_t {
    CreateNode,       // node, anchor (insert before), node_kind, target, name, args, kwargs
    SetInputs,        // node, args, kwargs
    SetTarget,        // node, node_kind, target
    SetMeta,          // node, name (key), value
    EraseMeta,        // node, name (key)
    EraseNode,        // node
    MoveNode,         // node, anchor (move before)
    SetModule,        // name (path), like (path of the module it copies), module
    RemoveModule,     // name (path)
    SetAttribute,     // name (path), tensor
    RemoveAttribute,  // name (path)
  };
  Kind kind;
  uint64_t node = 0;
  uint64_t anchor = 0;
  NodeKind node_kind = NodeKind::CallFunction;
  Symbol target;
  std::string name;
  Args args;
  Kwargs kwargs;
  Arg value;
  std::string like;
  ModuleInfo module;
  TensorInfo tensor;
};

using EditLog = std::vector<Edit>;

// Indices of the edits a replay must apply, in log order: an edit that a later one of the same
// node overwrites completely (inputs, target, one metadata key) is left out, so the GraphModule
// is written once per thing that changed. Composed passes re-mark and re-record the nodes they
// share (MergeLinears, then FuseBiasInLinear on the merged Linear).
std::vector<size_t> effective_edits(const EditLog& log);

}  // namespace fxopt
