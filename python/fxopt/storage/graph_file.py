"""`fxopt.save` / `fxopt.load`: a GraphModule written as its graph and tensors, not as pickled code.

`torch.save(graph_module)` pickles the generated Python source and re-traces it with fx proxies
on load, which fails on what fxopt's graphs hold (dynamic-size slices and expands, Cache
outputs, `_assert_is_none`) and drops every node's metadata, so reverse cannot work after it.
This file format instead holds the graph itself, written with plain data (`storage.values`):

* ``nodes``: per node its op, name, target (a callable by its qualified name, resolved when
  loading), args, kwargs and fxopt's metadata (marks and reversal records), in graph order;
* ``codegen``: the input / output pytree specs of Dynamo and export graphs, as torch's own
  `treespec_dumps` JSON (the model's output class, e.g. a transformers ModelOutput, is imported
  by name when loading);
* ``modules``: the module tree, per path its class when it is one of `torch.nn`'s (rebuilt with
  its plain attributes, `in_features`, `eps`...) or a plain `nn.Module` otherwise, and its
  parameters and buffers (tied tensors stored once; a None slot, a Conv2d's missing bias,
  stays None); a nested GraphModule (the body of a higher-order op Dynamo records, e.g. an
  autograd.Function in BLOOM) is written as a graph of its own;
* ``meta``: `gm.meta["fxopt_trace"]` and the other graph-level records fxopt keeps.

The file is a `torch.save` of that dict and loads with `weights_only=True`: loading runs no code
from the file. A graph calling a module of a class outside `torch.nn` cannot be written (fxopt's
tracers never make one); export's `_guards_fn` input check is left out, as its code cannot be
saved. `load` returns a plain `torch.fx.GraphModule` that computes what the saved one computed
and can be optimized or reversed further.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.fx import Graph, GraphModule, Node
from torch.fx.graph import CodeGen, _PyTreeCodeGen, _PyTreeInfo
from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE, TreeSpec, treespec_dumps, treespec_loads

from ..engine import codegen
from ..engine.bridge import APPLIED_ATTR, MARKS_KEY
from ..tracing import signature
from ..tracing.model_names import keeps_torch_nn_class
from .values import Encoder, Plain, StorageError, callable_name, decode, resolve

FORMAT = "fxopt.graph"
VERSION = 1
# Node metadata fxopt writes and reads back: marks and reversal records.
_NODE_META = (MARKS_KEY, "fxopt_reversal")
# Graph-level records (`gm.meta`) kept: how the graph was traced, which inputs it takes.
_GRAPH_META = ("fxopt_trace", signature.SIGNATURE_META_KEY)
# export's input check: a call_module node whose module holds generated code.
_GUARDS_FN = "_guards_fn"


def save(graph_module: GraphModule, path: str | os.PathLike[str]) -> None:
    """Write `graph_module` (any graph fxopt traced or transformed) to `path`.

    Raises:
        StorageError: the graph holds a value or module that cannot be written; the message
            names the node or module.
    """
    torch.save(to_plain(graph_module), path)


def load(path: str | os.PathLike[str]) -> GraphModule:
    """The GraphModule `save` wrote, with its metadata: reverse works on it as before saving.

    A `.pt2` (`fxopt optimize --save model.pt2`) loads as its ExportedProgram's module, with the
    call check of the graph it was exported from (tracing/signature.py).
    """
    if os.fspath(path).endswith(".pt2"):
        files = {signature.PT2_FILE: ""}
        module = torch.export.load(path, extra_files=files).module()
        assert isinstance(module, GraphModule)  # torch documents .module() as returning one
        signature.install_from_pt2_files(module, files)
        return module
    data = torch.load(path, weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StorageError(f"{path} is not a file written by fxopt.save")
    if data["version"] != VERSION:
        raise StorageError(f"{path} has format version {data['version']}; this fxopt reads {VERSION}")
    return from_plain(data)


def to_plain(graph_module: GraphModule) -> dict[str, Any]:
    """`graph_module` as the dict `save` writes."""
    encoder = Encoder()
    modules = _modules_to_plain(graph_module, encoder)
    return {
        "format": FORMAT,
        "version": VERSION,
        "class_name": type(graph_module).__name__,
        "graph": _graph_to_plain(graph_module, encoder),
        "modules": modules,
        "meta": {key: encoder.encode(graph_module.meta[key]) for key in _GRAPH_META if key in graph_module.meta},
        "applied": encoder.encode(graph_module.__dict__.get(APPLIED_ATTR)),
        "tensors": [_storable(t) for t in encoder.tensors],
    }


def from_plain(data: dict[str, Any]) -> GraphModule:
    tensors: list[torch.Tensor] = data["tensors"]
    graph_module = GraphModule(nn.Module(), Graph(), data["class_name"])
    _modules_from_plain(graph_module, data["modules"], tensors)
    graph_module.graph = _graph_from_plain(data["graph"], tensors)  # setter: owner, recompile
    codegen.recompile(graph_module)  # as fxopt compiles what it optimizes (engine/attribute_reads.py)
    graph_module.meta.update({k: decode(v, {}, tensors) for k, v in data["meta"].items()})
    applied = decode(data["applied"], {}, tensors)
    if applied is not None:
        graph_module.__dict__[APPLIED_ATTR] = applied
    signature.install(graph_module)
    return graph_module


def _graph_to_plain(graph_module: GraphModule, encoder: Encoder) -> dict[str, Plain]:
    dropped = {
        node.name
        for node in graph_module.graph.find_nodes(op="call_module", target=_GUARDS_FN)
        if not node.users
    }
    return {
        "nodes": [
            _node_to_plain(node, encoder) for node in graph_module.graph.nodes if node.name not in dropped
        ],
        "codegen": _codegen_to_plain(graph_module.graph._codegen),
    }


def _graph_from_plain(data: dict[str, Any], tensors: list[torch.Tensor]) -> Graph:
    graph = Graph()
    graph._codegen = _codegen_from_plain(data["codegen"])
    nodes: dict[str, Node] = {}
    for entry in data["nodes"]:
        op = entry["op"]
        target = resolve(entry["target"]) if op == "call_function" else entry["target"]
        args = decode(entry["args"], nodes, tensors)
        kwargs = decode(entry["kwargs"], nodes, tensors)
        node = graph.create_node(op, target, args, kwargs, name=entry["name"])
        if node.name != entry["name"]:
            raise StorageError(f"node {entry['name']!r} could not keep its name")
        node.meta.update({k: decode(v, nodes, tensors) for k, v in entry["meta"].items()})
        nodes[node.name] = node
    return graph


def _node_to_plain(node: Node, encoder: Encoder) -> dict[str, Plain]:
    try:
        target = callable_name(node.target) if node.op == "call_function" else node.target
        return {
            "op": node.op,
            "name": node.name,
            "target": target,
            "args": encoder.encode(node.args),
            "kwargs": encoder.encode(dict(node.kwargs)),
            "meta": {key: encoder.encode(node.meta[key]) for key in _NODE_META if key in node.meta},
        }
    except StorageError as exc:
        raise StorageError(f"node {node.name!r} ({node.op} {node.target}): {exc}") from exc


def _modules_to_plain(graph_module: GraphModule, encoder: Encoder) -> list[dict[str, Plain]]:
    called = {str(node.target) for node in graph_module.graph.find_nodes(op="call_module")}
    entries = []
    for path, module in graph_module.named_modules(remove_duplicate=False):
        if path == _GUARDS_FN:
            continue
        cls = type(module)
        keeps_class = bool(path) and keeps_torch_nn_class(cls)
        nested = bool(path) and isinstance(module, GraphModule)
        if path in called and not (keeps_class or nested):
            raise StorageError(
                f"module {path!r} is a {cls.__module__}.{cls.__qualname__} the graph calls; "
                "only torch.nn modules can be saved"
            )
        attributes = {}
        if keeps_class:
            tables = set(nn.Module().__dict__)
            try:
                attributes = {
                    key: encoder.encode(value) for key, value in module.__dict__.items() if key not in tables
                }
            except StorageError as exc:
                raise StorageError(f"module {path!r}: {exc}") from exc
        entries.append(
            {
                "path": path,
                "class": f"{cls.__module__}.{cls.__qualname__}" if keeps_class else None,
                "graph": _graph_to_plain(module, encoder) if nested else None,
                "training": module.training,
                "attributes": attributes,
                "parameters": [[n, _slot(encoder, p)] for n, p in module._parameters.items()],
                "buffers": [
                    [n, _slot(encoder, b), n not in module._non_persistent_buffers_set]
                    for n, b in module._buffers.items()
                ],
                "tensors": [
                    [n, encoder.tensor(v)]
                    for n, v in module.__dict__.items()
                    if isinstance(v, torch.Tensor) and not keeps_class and not nested
                ],
            }
        )
    return entries


def _slot(encoder: Encoder, tensor: torch.Tensor | None) -> int | None:
    """A parameter or buffer slot: its tensor's index, or None for a slot that holds None (a
    Conv2d without bias), which the module's code reads as an attribute all the same."""
    return None if tensor is None else encoder.tensor(tensor)


def _modules_from_plain(root: GraphModule, entries: list[dict[str, Any]], tensors: list[torch.Tensor]) -> None:
    nested: list[tuple[GraphModule, dict[str, Any]]] = []  # graphs set once their attributes exist
    for entry in entries:
        path = entry["path"]
        module: nn.Module
        if not path:
            module = root
        elif entry["graph"] is not None:
            module = GraphModule(nn.Module(), Graph())
            nested.append((module, entry["graph"]))
        else:
            module = _empty_module(entry["class"], {k: decode(v, {}, tensors) for k, v in entry["attributes"].items()})
        if path:
            parent, _, leaf = path.rpartition(".")
            root.get_submodule(parent).add_module(leaf, module)
        module.training = entry["training"]
        for name, index in entry["parameters"]:
            module.register_parameter(name, None if index is None else tensors[index])
        for name, index, persistent in entry["buffers"]:
            module.register_buffer(name, None if index is None else tensors[index], persistent=persistent)
        for name, index in entry["tensors"]:
            setattr(module, name, tensors[index])
    for graph_module, graph in nested:
        graph_module.graph = _graph_from_plain(graph, tensors)


def _empty_module(class_name: str | None, attributes: dict[str, Any]) -> nn.Module:
    if class_name is None:
        return nn.Module()
    cls = resolve(class_name)
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    module.__dict__.update(attributes)
    return module


def _storable(tensor: torch.Tensor) -> Any:
    """A tensor as torch.save writes it with weights_only loads: Parameters stay Parameters."""
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(tensor.detach(), requires_grad=tensor.requires_grad)
    return tensor.detach()


def _codegen_to_plain(codegen: CodeGen) -> dict[str, Plain]:
    if type(codegen) is CodeGen:
        return {"kind": "plain"}
    if isinstance(codegen, _PyTreeCodeGen):
        info = codegen.pytree_info
        try:
            return {
                "kind": "pytree",
                "orig_args": list(info.orig_args),
                "in_spec": treespec_dumps(info.in_spec),
                "out_spec": None if info.out_spec is None else treespec_dumps(info.out_spec),
            }
        except Exception as exc:  # a pytree node type registered without a serialized name
            raise StorageError(f"cannot save the graph's input/output structure: {exc}") from exc
    raise StorageError(f"cannot save a graph with code generator {type(codegen).__qualname__}")


def _codegen_from_plain(data: dict[str, Any]) -> CodeGen:
    if data["kind"] == "plain":
        return CodeGen()
    out_spec = None if data["out_spec"] is None else _spec_from_json(data["out_spec"])
    return _PyTreeCodeGen(_PyTreeInfo(data["orig_args"], _spec_from_json(data["in_spec"]), out_spec))


def _spec_from_json(spec: str) -> TreeSpec:
    """`treespec_loads`, once every node type the spec names is registered with pytree.

    pytree finds a type by its serialized name only once it is registered: a transformers
    ModelOutput class registers itself when its module is imported; transformers' Cache classes
    are registered by its exporter (as tracing did), which is asked only when a file names one.
    """
    for name in _type_names(json.loads(spec)):
        if name in SERIALIZED_TYPE_TO_PYTHON_TYPE:
            continue
        cls = resolve(name.replace(":", "."))  # transformers names its caches `module:Class`
        if name not in SERIALIZED_TYPE_TO_PYTHON_TYPE and cls.__module__.startswith("transformers."):
            from transformers.exporters.exporter_dynamo import register_pytree_node

            register_pytree_node(cls)
    return treespec_loads(spec)


def _type_names(node: Any) -> Iterator[str]:
    """The node type names in a `treespec_dumps` JSON value."""
    if isinstance(node, list):
        for item in node:
            yield from _type_names(item)
    elif isinstance(node, dict):
        if isinstance(node.get("type"), str):
            yield node["type"]
        yield from _type_names(node.get("children_spec", []))
