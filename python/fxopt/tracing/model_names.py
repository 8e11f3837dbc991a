"""Give a Dynamo graph the model's own names and module tree.

`torch._dynamo.export` stores every weight flat on the GraphModule under a mangled name
(`L__self___encoder_layer_0_attention_self_query_weight`), so `state_dict()` keys do not match
the model's, `load_state_dict(model.state_dict())` fails and `get_submodule` finds nothing. The
weights are the model's own tensor objects, so each one is found in the model by identity and put
back where the model keeps it, in a copy of the model's module tree:

* every module path of the model exists; a module of `torch.nn` itself (Linear, LayerNorm,
  Embedding, Conv2d, ModuleList...) keeps its class and plain attributes (`in_features`, `eps`),
  any other class (the model's own, e.g. `BertSelfAttention`) becomes a plain `nn.Module`, so
  the graph never needs the model's Python code (it holds no call of those modules);
* every parameter and buffer of the model is registered at each of its paths, tied weights at
  every alias (T5's `shared.weight` is also `encoder.embed_tokens.weight`), non-persistent
  buffers as non-persistent: `state_dict()` has the model's keys, in the model's order;
* `get_attr` / `call_module` targets are renamed to the model's path of the object they read.

A lifted value the model does not hold (a constant Dynamo made) keeps its name.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn
from torch.fx import GraphModule

# Dynamo's record of the mangled names; stale once the names are the model's.
_DYNAMO_NAMES_KEY = "dynamo_flat_name_to_original_fqn"


def restore_model_names(graph_module: GraphModule, model: nn.Module) -> None:
    """Rename `graph_module`'s attributes to `model`'s paths and rebuild its module tree."""
    paths: dict[int, str] = {}
    for name, value in [*model.named_parameters(), *model.named_buffers(), *model.named_modules()]:
        paths.setdefault(id(value), name)
    kept: dict[str, Any] = {}  # attributes the model does not hold, by their Dynamo name
    for node in graph_module.graph.find_nodes(op="get_attr") + graph_module.graph.find_nodes(
        op="call_module"
    ):
        assert isinstance(node.target, str)
        value = _lookup(graph_module, node.target)
        path = paths.get(id(value))
        if path is None:
            kept[node.target] = value
        else:
            node.target = path
    for table in ("_parameters", "_buffers", "_modules"):
        getattr(graph_module, table).clear()
    graph_module._non_persistent_buffers_set.clear()
    copies: dict[str, nn.Module] = {"": graph_module}
    for path, module in model.named_modules(remove_duplicate=False):
        if path:
            parent, _, leaf = path.rpartition(".")
            copies[path] = _skeleton(module)
            copies[parent].add_module(leaf, copies[path])
        target = copies[path]
        for name, parameter in module._parameters.items():
            target.register_parameter(name, parameter)
        for name, buffer in module._buffers.items():
            target.register_buffer(
                name, buffer, persistent=name not in module._non_persistent_buffers_set
            )
    for name, value in kept.items():
        _place(graph_module, name, value)
    graph_module.meta.pop(_DYNAMO_NAMES_KEY, None)
    graph_module.recompile()


def _lookup(root: nn.Module, target: str) -> Any:
    owner, _, leaf = target.rpartition(".")
    return getattr(root.get_submodule(owner), leaf)


def _place(root: nn.Module, target: str, value: Any) -> None:
    owner, _, leaf = target.rpartition(".")
    module = root.get_submodule(owner)
    if isinstance(value, nn.Parameter):
        module.register_parameter(leaf, value)
    elif isinstance(value, torch.Tensor):
        module.register_buffer(leaf, value)
    elif isinstance(value, nn.Module):
        module.add_module(leaf, value)
    else:
        setattr(module, leaf, value)


def keeps_torch_nn_class(cls: type) -> bool:
    """Whether a module of class `cls` is rebuilt as that class: one of torch.nn's own, found
    again by its name (not a class made at run time, such as a parametrized Conv1d's)."""
    if not cls.__module__.startswith("torch.nn."):
        return False
    found: object = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


def _skeleton(module: nn.Module) -> nn.Module:
    """An empty module standing for `module` in the tree: its class and plain attributes when it
    is one of torch.nn's own, a plain nn.Module otherwise; no parameters, buffers or children."""
    cls = type(module)
    if not keeps_torch_nn_class(cls):
        skeleton = nn.Module()
    else:
        skeleton = cls.__new__(cls)
        nn.Module.__init__(skeleton)
        tables = set(skeleton.__dict__)
        skeleton.__dict__.update(
            {key: value for key, value in module.__dict__.items() if key not in tables}
        )
    skeleton.train(module.training)
    return skeleton
