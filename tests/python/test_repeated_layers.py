"""fxopt.trace's Dynamo and sized modes trace two of a stack of alike layers and copy the rest
(`fxopt.tracing.repeated_layers`): the result must be the graph a whole trace gives, and every
model where copying would not give the model's own computation must be traced whole."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import fxopt
from fxopt.tracing import repeated_layers
from fxopt.tracing.train_mode import TrainModeWarning

transformers = pytest.importorskip("transformers")

TRACERS = ("dynamo", "sized")
"""The tracers that copy alike layers."""


def _whole_trace(
    model: nn.Module, inputs: dict[str, torch.Tensor], monkeypatch: pytest.MonkeyPatch, mode: str = "dynamo"
) -> torch.fx.GraphModule:
    with monkeypatch.context() as patch:
        patch.setattr(repeated_layers, "find_stacks", lambda model: [])
        return fxopt.trace(model, example_inputs=inputs, mode=mode)


def _operations(graph_module: torch.fx.GraphModule) -> list[tuple[str, str, list[object]]]:
    """Each node's operation, target and arguments, nodes named by their position."""
    nodes = list(graph_module.graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    described = []
    for node in nodes:
        arguments = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: f"%{position[n]}")
        described.append((node.op, str(node.target), [repr(arguments)]))
    return described


def _bert(layers: int = 4) -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def _text(batch: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2 :] = 0
    return {"input_ids": torch.randint(0, 100, (batch, length), generator=generator), "attention_mask": mask}


@pytest.mark.parametrize("mode", TRACERS)
def test_a_bert_stack_is_traced_twice_and_copied_into_the_whole_graph(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _bert(layers=4)
    inputs = _text(2, 16)
    copied = fxopt.trace(model, example_inputs=inputs, mode=mode)
    whole = _whole_trace(model, inputs, monkeypatch, mode)
    assert copied.meta["fxopt_trace"]["copied_layers"] == {"encoder.layer": 2}
    assert whole.meta["fxopt_trace"]["copied_layers"] == {}
    assert _operations(copied) == _operations(whole)
    # The copies read their own layer's weights, the model's tensors themselves (a Dynamo graph
    # reads the weight, a sized graph calls the module).
    dense = "encoder.layer.3.output.dense"
    if mode == "dynamo":
        assert dense + ".weight" in {str(n.target) for n in copied.graph.find_nodes(op="get_attr")}
    else:
        assert copied.graph.find_nodes(op="call_module", target=dense)
    assert copied.get_parameter(dense + ".weight") is model.encoder.layer[3].output.dense.weight
    assert list(copied.state_dict()) == list(model.state_dict())
    # Their module stacks name their layer, as the tracer's record of a traced layer does.
    in_dense = [
        n for n in copied.graph.nodes
        if any(fqn.endswith(dense) for fqn, _ in n.meta.get("nn_module_stack", {}).values())
    ]
    expected = [("call_function", torch._C._nn.linear)] if mode == "dynamo" else [("call_module", dense)]
    assert [(n.op, n.target) for n in in_dense if n.op != "get_attr"] == expected
    # The same values as eager at other sizes (batch and sequence stay dynamic).
    other = _text(3, 9, seed=1)
    with torch.no_grad():
        expected = model(**other)
        torch.testing.assert_close(copied(**other), expected, rtol=0, atol=0)
        torch.testing.assert_close(whole(**other), expected, rtol=0, atol=0)


class _Block(nn.Module):
    def __init__(self, width: int, index: int, scale: float = 1.0) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.layer_idx = index  # differs by the layers' distance: a layer's own index
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale + x


class _Stack(nn.Module):
    """A stem, then `count` blocks; `flip_at` negates the stream after that block (the parent's
    loop treats one layer differently), `keep_all` returns every block's output."""

    def __init__(self, count: int = 5, flip_at: int | None = None, keep_all: bool = False, scales: list[float] | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Linear(8, 8)
        scales = scales or [1.0] * count
        self.blocks = nn.ModuleList(_Block(8, i, scales[i]) for i in range(count))
        self.flip_at = flip_at
        self.keep_all = keep_all

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        h = self.stem(x)
        kept = []
        for i, block in enumerate(self.blocks):
            h = block(h)
            if i == self.flip_at:
                h = -h
            kept.append(h)
        return tuple(kept) if self.keep_all else h


def _check_traced(model: nn.Module, copied: dict[str, int], mode: str = "dynamo") -> torch.fx.GraphModule:
    x = torch.randn(4, 8)
    graph_module = fxopt.trace(model, example_inputs=(x,), mode=mode)
    assert graph_module.meta["fxopt_trace"]["copied_layers"] == copied
    other = torch.randn(6, 8)
    with torch.no_grad():
        torch.testing.assert_close(graph_module(other), model(other), rtol=0, atol=0)
    return graph_module


@pytest.mark.parametrize("mode", TRACERS)
def test_a_plain_module_list_of_alike_blocks_is_copied(mode: str) -> None:
    graph_module = _check_traced(_Stack(count=5).eval(), {"blocks": 3}, mode)
    linears = [
        n for n in graph_module.graph.nodes
        if n.target is torch._C._nn.linear
        or (n.op == "call_module" and isinstance(graph_module.get_submodule(str(n.target)), nn.Linear))
    ]
    assert len(linears) == 6


@pytest.mark.parametrize("mode", TRACERS)
def test_the_parents_loop_treating_a_later_layer_differently_is_traced_whole(
    mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # The two traced layers match, so only the check against the model sees the difference;
    # it says nothing (fx's GraphModule prints the code of a failing line).
    _check_traced(_Stack(count=5, flip_at=3).eval(), {}, mode)
    assert "FX-traced" not in capfd.readouterr().err


@pytest.mark.parametrize("mode", TRACERS)
def test_an_image_model_is_checked_on_its_whole_example(mode: str) -> None:
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    model = transformers.ViTModel(config).eval()
    pixels = torch.randn(2, 3, 32, 32)
    graph_module = fxopt.trace(model, example_inputs={"pixel_values": pixels}, mode=mode)
    layers = next(path for path, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == 4)
    assert graph_module.meta["fxopt_trace"]["copied_layers"] == {layers: 2}
    other = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(graph_module(pixel_values=other), model(pixel_values=other), rtol=0, atol=0)


@pytest.mark.parametrize("mode", TRACERS)
def test_every_layers_output_kept_is_traced_whole(mode: str) -> None:
    _check_traced(_Stack(count=4, keep_all=True).eval(), {}, mode)


@pytest.mark.parametrize("mode", TRACERS)
def test_layers_with_other_settings_are_not_alike(mode: str) -> None:
    model = _Stack(count=5, scales=[1.0, 2.0, 1.0, 1.0, 1.0]).eval()
    assert [(s.path, s.first, s.count) for s in repeated_layers.find_stacks(model)] == [("blocks", 2, 3)]
    _check_traced(model, {"blocks": 1}, mode)


@pytest.mark.parametrize("mode", TRACERS)
def test_a_hook_on_one_layer_keeps_the_stack_whole(mode: str) -> None:
    model = _Stack(count=5).eval()
    model.blocks[4].register_forward_hook(lambda module, args, out: out * 3)
    assert [(s.first, s.count) for s in repeated_layers.find_stacks(model)] == []
    _check_traced(model, {}, mode)


def test_a_model_in_train_mode_is_traced_whole() -> None:
    model = _Stack(count=5).train()
    x = torch.randn(4, 8)
    with pytest.warns(TrainModeWarning):
        graph_module = fxopt.trace(model, example_inputs=(x,), mode="dynamo")
    assert graph_module.meta["fxopt_trace"]["copied_layers"] == {}


class _Carrying(nn.Module):
    """Takes a list it appends to, as a key/value cache object is updated by the forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(_Block(8, i) for i in range(4))

    def forward(self, x: torch.Tensor, seen: list[int]) -> torch.Tensor:
        seen.append(1)
        for block in self.blocks:
            x = block(x)
        return x


def test_an_input_the_forward_could_change_is_never_run_by_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _Carrying().eval(), torch.randn(4, 8)
    whole: list[int] = []
    _whole_trace(model, {"x": x, "seen": whole}, monkeypatch)
    seen: list[int] = []
    graph_module = fxopt.trace(model, example_inputs={"x": x, "seen": seen}, mode="dynamo")
    assert graph_module.meta["fxopt_trace"]["copied_layers"] == {}
    assert seen == whole  # what Dynamo's trace itself does to it, no more


class _Indexing(nn.Module):
    """Reads its last layer by index: it cannot run with the stack shortened."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(_Block(8, i) for i in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks[:3]:
            x = block(x)
        return self.blocks[3](x)


@pytest.mark.parametrize("mode", TRACERS)
def test_a_model_indexing_its_layers_is_traced_whole(mode: str) -> None:
    _check_traced(_Indexing().eval(), {}, mode)
    assert [(s.first, s.count) for s in repeated_layers.find_stacks(_Indexing())] == [(0, 4)]


def test_the_traced_copy_shortens_the_stack_and_leaves_the_model_alone() -> None:
    model = _Stack(count=4).eval()
    layers = list(model.blocks)
    short = repeated_layers.shortened(model, repeated_layers.find_stacks(model))
    assert list(short.blocks) == layers[:2]
    assert list(model.blocks) == layers
    assert short.stem is model.stem and short.blocks[1] is layers[1]
    assert repeated_layers.shortened(model, []) is model  # nothing to shorten: nothing copied
