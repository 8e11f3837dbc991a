"""fxopt's recompile compiles a forward that reads each module on the get_attr paths once
(`fxopt.engine.attribute_reads`).

Checked on graphs whose tensors sit deep in the module tree, as traced models' are: the same
outputs, `gm.code` still fx's source, the line numbers fx maps to nodes unchanged, fewer
`nn.Module.__getattr__` calls, names that cannot collide, and torch's own recompile (a deep copy)
compiling the plain source again.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from pathlib import Path

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from fxopt.engine import codegen
from fxopt.engine.attribute_reads import read_modules_once
from fxopt.optimization import ChangeTrueDivToMulByInverse, compose


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.proj.weight, self.proj.bias) * self.scale / 2.0


class Deep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.encoder.layer:
            x = block(x)
        return x * self.head


class Tracer(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return False  # every parameter read as a get_attr, as Dynamo's graphs read them


def traced() -> torch.fx.GraphModule:
    model = Deep()
    return torch.fx.GraphModule(model, Tracer().trace(model))


def forward_source(gm: torch.fx.GraphModule) -> str:
    """The source gm's forward was compiled from (gm.code is fx's own)."""
    return inspect.getsource(type(gm).forward)


def module_reads(gm: torch.fx.GraphModule, x: torch.Tensor) -> int:
    """Calls of nn.Module.__getattr__ (a step through a submodule) in one forward."""
    calls = 0
    original = nn.Module.__getattr__

    def counted(self: nn.Module, name: str) -> object:
        nonlocal calls
        calls += 1
        return original(self, name)

    nn.Module.__getattr__ = counted  # type: ignore[method-assign]
    try:
        gm(x)
    finally:
        nn.Module.__getattr__ = original  # type: ignore[method-assign]
    return calls


def test_the_forward_reads_each_module_once_with_the_same_results() -> None:
    gm = traced()
    x = torch.randn(4, 8)
    expected = gm(x)
    plain_code, plain_map, plain_reads = gm.code, gm._lineno_map, module_reads(gm, x)
    get_attrs = sum(1 for node in gm.graph.nodes if node.op == "get_attr")
    assert get_attrs == 10  # 3 x (weight, bias, scale) + head

    codegen.recompile(gm)
    assert gm.code == plain_code and gm._lineno_map == plain_map
    source = forward_source(gm)
    assert 'getattr(_module_1, "0")' in source  # a path step that is no identifier
    assert len(source.strip().splitlines()) == len(plain_code.strip().splitlines())
    # plain: encoder, layer, "0", proj, then the tensor (5 steps) for a weight and a bias, 4 for
    # a buffer; now encoder, layer, the 3 blocks and their 3 projections once, and each tensor
    assert plain_reads == 3 * (5 + 5 + 4) + 1
    assert module_reads(gm, x) == 8 + get_attrs
    torch.testing.assert_close(gm(x), expected, rtol=0, atol=0)


def test_the_module_locals_take_no_name_the_graph_uses() -> None:
    gm = traced()
    first = next(node for node in gm.graph.nodes if node.op == "placeholder")
    first.name = "_module_0"  # the name the first local would take
    gm.recompile()
    x = torch.randn(2, 8)
    expected = gm(x)
    codegen.recompile(gm)
    assert "_module_1 = self.encoder" in forward_source(gm)
    torch.testing.assert_close(gm(x), expected, rtol=0, atol=0)


def test_transformations_recompile_that_way_and_deep_copies_keep_it() -> None:
    gm = traced()
    x = torch.randn(3, 8)
    expected = gm(x)
    optimized = compose(ChangeTrueDivToMulByInverse(), inplace=False)(gm)
    assert "_module_0 = self.encoder" in forward_source(optimized)
    torch.testing.assert_close(optimized(x), expected)
    # GraphModule.__init__ (torch's recompile) compiles the plain source; the copy then reads
    # through locals again, and so does a copy of the copy
    copied = copy.deepcopy(optimized)
    again = copy.deepcopy(copied)
    for copy_ in (copied, again):
        assert copy_.code == optimized.code and forward_source(copy_) == forward_source(optimized)
        assert module_reads(copy_, x) == module_reads(optimized, x) == 8 + 10
        assert copy_.encoder is not optimized.encoder  # a deep copy still
        torch.testing.assert_close(copy_(x), optimized(x), rtol=0, atol=0)
    assert "_module_0" not in forward_source(copy.deepcopy(gm))  # a graph never recompiled by fxopt


def test_lines_printed_otherwise_are_left_as_they_are() -> None:
    """Only a line exactly as fx prints a get_attr changes (another code generator's spelling,
    a comment added to it, stays)."""
    gm = traced()
    code = gm.graph.python_code("self")
    line = '    encoder_layer_0_proj_weight = getattr(self.encoder.layer, "0").proj.weight'
    assert line in code.src.splitlines()
    commented = dataclasses.replace(code, src=code.src.replace(line, line + "  # kept"))
    rewritten = read_modules_once(commented, gm.graph)
    assert line + "  # kept" in rewritten.src.splitlines()
    bias = next(text for text in rewritten.src.splitlines() if "encoder_layer_0_proj_bias =" in text)
    assert bias.startswith("    _module_0 = self.encoder; ")  # the next line makes the locals
    assert bias.endswith("; encoder_layer_0_proj_bias = _module_3.bias")


def test_a_saved_graph_loads_reading_each_module_once(tmp_path: Path) -> None:
    import fxopt

    gm = traced()
    x = torch.randn(2, 8)
    codegen.recompile(gm)
    fxopt.save(gm, tmp_path / "deep.fxopt")
    loaded = fxopt.load(tmp_path / "deep.fxopt")
    assert forward_source(loaded).count("_module_") == forward_source(gm).count("_module_") > 0
    torch.testing.assert_close(loaded(x), gm(x), rtol=0, atol=0)


class Calls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.encoder.layer:
            x = linear(x).relu()
        return x


def test_a_symbolic_trace_calls_its_modules_through_the_locals() -> None:
    gm = torch.fx.symbolic_trace(Calls())  # the Linears stay call_module nodes
    x = torch.randn(2, 8)
    expected = gm(x)
    # encoder, layer and the Linear per call, then its weight and bias inside its forward
    assert module_reads(gm, x) == 3 * 3 + 3 * 2
    codegen.recompile(gm)
    source = forward_source(gm)
    assert '_module_0 = self.encoder; _module_1 = _module_0.layer; encoder_layer_0 = getattr(_module_1, "0")(x)' in source
    assert module_reads(gm, x) == 2 + 3 + 3 * 2
    torch.testing.assert_close(gm(x), expected, rtol=0, atol=0)


def test_a_read_no_node_uses_goes_through_the_locals_too() -> None:
    """A fused call that replaced a weight leaves the weight's get_attr for reverse; fx frees it on
    its own line (`x = path;  x = None`), which reads through the locals like any other."""
    gm = traced()
    x = torch.randn(2, 8)
    expected = gm(x)
    output = next(node for node in gm.graph.nodes if node.op == "output")
    with gm.graph.inserting_before(output):
        unused = gm.graph.get_attr("encoder.layer.2.proj.weight")
    gm.recompile()
    assert f'{unused.name} = getattr(self.encoder.layer, "2").proj.weight;  {unused.name} = None' in gm.code
    plain_reads = module_reads(gm, x)
    assert plain_reads == 3 * (5 + 5 + 4) + 1 + 5
    codegen.recompile(gm)
    source = forward_source(gm)
    assert f"{unused.name} = _module_7.weight;  {unused.name} = None" in source  # the third proj
    assert module_reads(gm, x) == 8 + 11  # the modules once, then each of the 11 tensors
    torch.testing.assert_close(gm(x), expected, rtol=0, atol=0)
