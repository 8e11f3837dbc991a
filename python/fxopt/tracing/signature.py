"""The call a Dynamo or export graph takes, checked before it runs, in the model's terms.

A traced graph takes exactly the inputs it was traced with; the model takes more (every
optional forward parameter). Without this check a call with an input the trace did not keep
(`token_type_ids`) or without one it did keep (`attention_mask`) fails as a bare TypeError or
"kwarg keyword mismatch" naming no way out. A forward pre-hook on the GraphModule instead:

* accepts positional or keyword inputs, in the traced inputs' order;
* fills an omitted (or None) `attention_mask` with ones when `input_ids` is given, which is
  what transformers models do with `attention_mask=None` (their forward default), so the graph
  takes the calls the model takes without a mask;
* drops an untraced optional input passed as None (its default, which the trace used);
* refuses anything else with one TypeError line naming the input and the `input_names=[...]`
  to trace with.

The record (`gm.meta["fxopt_signature"]`, plain data) survives deepcopy and `fxopt.save`, and
`install` puts the hook back on deep copies and loaded graphs.

A `.pt2` cannot carry the hook: `ExportedProgram.module()` builds a new GraphModule whose
generated forward first matches the call against the exported input spec (torch's "kwarg
keyword mismatch" ValueError, or a TypeError deep in the graph for a None), and nothing from
the file runs before it. So the record travels as an extra file of the `.pt2`
(`PT2_FILE`), and `fxopt.load` of a `.pt2` installs the check on the module it returns;
`torch.export.load(...).module()` alone gives torch's own errors.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, TypedDict

import torch
from torch import nn
from torch.fx import GraphModule

SIGNATURE_META_KEY = "fxopt_signature"

PT2_FILE = "fxopt_signature.json"
"""The extra file of a `.pt2` (torch.export.save's `extra_files`) that holds the record."""

# A traced input the call may omit, and the input its default is made from: transformers
# models treat attention_mask=None (their default) as all ones over input_ids' batch and sequence.
_FILLABLE = {"attention_mask": "input_ids"}


class Signature(TypedDict):
    """What calls a traced graph takes; stored in `gm.meta["fxopt_signature"]`."""

    model: str
    """The model's class name, for messages."""
    inputs: list[str]
    """The graph's inputs, in the model's forward order."""
    optional: list[str]
    """The model's other forward parameters whose default is None: None is accepted for them."""
    fillable: dict[str, str]
    """Traced inputs a call may omit, each with the input its all-ones default is shaped like."""


def record(graph_module: GraphModule, model: nn.Module, inputs: list[str]) -> None:
    """Store `graph_module`'s signature and install the check."""
    parameters = inspect.signature(model.forward).parameters
    graph_module.meta[SIGNATURE_META_KEY] = Signature(
        model=type(model).__name__,
        inputs=list(inputs),
        optional=[
            name
            for name, parameter in parameters.items()
            if name not in inputs and parameter.default is None
        ],
        fillable={
            name: source
            for name, source in _FILLABLE.items()
            if name in inputs and source in inputs and parameters[name].default is None
        },
    )
    install(graph_module)


def install(graph_module: GraphModule) -> None:
    """Put the check in front of `graph_module`'s forward, if it has a signature record.

    A GraphModule's deep copy (what `compose(inplace=False)` and presets return) keeps no
    forward hooks but runs its deepcopy hooks, so this one installs the check on each copy.
    """
    if SIGNATURE_META_KEY not in graph_module.meta:
        return
    if check_call not in graph_module._forward_pre_hooks.values():
        graph_module.register_forward_pre_hook(check_call, with_kwargs=True, prepend=True)
    if install not in graph_module._deepcopy_hooks:
        graph_module._register_deepcopy_hook(install)


def check_call(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call as keyword inputs the graph takes, or one TypeError line saying why it cannot."""
    assert isinstance(module, GraphModule)
    signature: Signature = module.meta[SIGNATURE_META_KEY]
    inputs = signature["inputs"]
    where = f"fxopt: this graph of {signature['model']} (inputs: {', '.join(inputs)})"
    if len(args) > len(inputs):
        raise TypeError(f"{where} takes {len(inputs)} inputs, got {len(args)} positional")
    bound = dict(zip(inputs, args))
    for name, value in kwargs.items():
        if name in bound:
            raise TypeError(f"{where} got input {name!r} twice, by position and by name")
        bound[name] = value
    for name in [n for n in bound if n not in inputs]:
        if bound[name] is None and name in signature["optional"]:
            del bound[name]  # the default the trace used
            continue
        retrace = ", ".join(repr(n) for n in [*inputs, name])
        raise TypeError(
            f"{where} was traced without input {name!r}; trace with input_names=[{retrace}] to pass it"
        )
    for name, source in signature["fillable"].items():
        if bound.get(name) is None and isinstance(bound.get(source), torch.Tensor):
            shape_of = bound[source]
            bound[name] = torch.ones(shape_of.shape[:2], dtype=torch.long, device=shape_of.device)
    missing = [name for name in inputs if name not in bound]
    if missing:
        raise TypeError(f"{where} needs input {missing[0]!r}, which the call does not give")
    return (), {name: bound[name] for name in inputs}


def pt2_files(graph_module: GraphModule) -> dict[str, str]:
    """The extra files that carry `graph_module`'s record into a `.pt2`; none if it has none."""
    if SIGNATURE_META_KEY not in graph_module.meta:
        return {}
    return {PT2_FILE: json.dumps(graph_module.meta[SIGNATURE_META_KEY])}


def install_from_pt2_files(module: GraphModule, files: dict[str, str]) -> None:
    """Install the check on a `.pt2`'s module from the extra files read with it, if they hold one."""
    if files.get(PT2_FILE):
        module.meta[SIGNATURE_META_KEY] = json.loads(files[PT2_FILE])
        install(module)
