"""A copy of a GraphModule that a copy-on-write pass may change without touching the original,
made without copying a tensor.

Passes never write a tensor they were given; they store new ones (an int8 weight) under the path
of the module they belong to. A copy with its own graph and its own module tables, whose entries
are the original's tensors, takes those new tensors in its tables alone. `copy.deepcopy` copies
every weight as well: 0.35 s of GPT-2's int8 calibration, for a probe run of the pass.
"""

from __future__ import annotations

import copy

from torch import nn
from torch.fx import GraphModule


def sharing_copy(graph_module: GraphModule) -> GraphModule:
    """`graph_module` with its own graph and module tables, sharing its tensors."""
    shared = GraphModule(graph_module, copy.deepcopy(graph_module.graph))
    own_modules(shared)
    return shared


def own_modules(module: nn.Module) -> None:
    """Gives `module` copies of its submodules that share their tensors but not their tables."""
    for name, child in list(module.named_children()):
        own = copy.copy(child)
        own._parameters = dict(child._parameters)
        own._buffers = dict(child._buffers)
        own._non_persistent_buffers_set = set(child._non_persistent_buffers_set)
        own._modules = dict(child._modules)
        module._modules[name] = own
        own_modules(own)
