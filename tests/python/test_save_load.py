"""`fxopt.save` / `fxopt.load`: every graph fxopt makes loads back, computes the same, reverses.

Plain `torch.save(gm)` / `torch.load` re-traces the generated code and fails on most of these
(dynamic-size slices, Cache outputs, `_assert_is_none`) and drops node metadata; fxopt's own
format (`fxopt.storage.graph_file`) holds the graph itself.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import fxopt
from fxopt.optimization import ChangePrecision, QuantizeLinearsInt8, compose
from fxopt.storage.values import StorageError
from fxopt.tracing.dummy_inputs import build_dummy_inputs, default_input_names
from model_coverage import ARCHITECTURES

_NAMED = {arch.name: arch for arch in ARCHITECTURES}


def _leaves(value: object) -> list[torch.Tensor]:
    flat, _ = torch.utils._pytree.tree_flatten(value)
    return [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]


def _assert_same(got: object, want: object) -> None:
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    assert len(got_leaves) == len(want_leaves) > 0
    for a, b in zip(got_leaves, want_leaves):
        assert torch.equal(a, b)


def _round_trip(graph_module: torch.fx.GraphModule, tmp_path: Path) -> torch.fx.GraphModule:
    path = tmp_path / "graph.fxopt"
    fxopt.save(graph_module, path)
    return fxopt.load(path)


def _trace(name: str, mode: str = "auto") -> tuple[nn.Module, torch.fx.GraphModule, dict[str, torch.Tensor]]:
    model = _NAMED[name].build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph_module = fxopt.trace(model, mode=mode)  # type: ignore[arg-type]
    inputs = build_dummy_inputs(model, default_input_names(model))
    return model, graph_module, inputs


# A representative subset of the matrix: encoder, decoders with a Cache output, encoder-decoder
# with an EncoderDecoderCache, a vision transformer, a CNN with batch norms; BLOOM's Dynamo
# graph holds a nested GraphModule (an autograd.Function body), EfficientNet's symbolic one
# calls Conv2d modules without bias; Wav2Vec2 has a weight-norm parametrized Conv1d.
_CASES = [
    *((name, preset) for name in ("BERT", "GPT-2") for preset in (None, "default", "fast")),
    *((name, "default") for name in ("LLaMA", "T5", "ViT", "ResNet", "BLOOM", "EfficientNet", "Wav2Vec2")),
]


@pytest.mark.parametrize(("name", "preset"), _CASES)
def test_saved_graph_loads_computes_the_same_and_reverses(name: str, preset: str | None, tmp_path: Path) -> None:
    model, traced, inputs = _trace(name)
    graph_module = traced if preset is None else fxopt.preset(preset)(traced)
    loaded = _round_trip(graph_module, tmp_path)
    with torch.no_grad():
        _assert_same(loaded(**inputs), graph_module(**inputs))
        assert loaded.state_dict().keys() == graph_module.state_dict().keys()
        if preset is not None:
            restored = fxopt.preset(preset)(loaded, reverse=True)
            _assert_same(restored(**inputs), traced(**inputs))


@pytest.mark.parametrize("mode", ["symbolic", "dynamo", "export"])
def test_every_dialect_round_trips(mode: str, tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5)).eval()
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = fxopt.trace(model, example_inputs=x, mode=mode)  # type: ignore[arg-type]
    optimized = fxopt.preset("default")(traced)
    loaded = _round_trip(optimized, tmp_path)
    torch.testing.assert_close(loaded(x), model(x))
    assert torch.equal(fxopt.preset("default")(loaded, reverse=True)(x), traced(x))


def test_bfloat16_and_int8_round_trip_and_reverse(tmp_path: Path) -> None:
    _, traced, inputs = _trace("BERT")
    for transformation in (ChangePrecision(dtype=torch.bfloat16), QuantizeLinearsInt8()):
        pipeline = compose(transformation, inplace=False)
        optimized = pipeline(traced)
        loaded = _round_trip(optimized, tmp_path)
        with torch.no_grad():
            _assert_same(loaded(**inputs), optimized(**inputs))
            _assert_same(pipeline(loaded, reverse=True)(**inputs), traced(**inputs))


class _UserModel(nn.Module):
    """A class only this test module defines: a fresh process cannot import it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * 2


def test_loads_in_a_fresh_process_without_the_models_class(tmp_path: Path) -> None:
    model = _UserModel().eval()
    x = torch.randn(3, 4)
    path = tmp_path / "user.fxopt"
    fxopt.save(fxopt.optimize(model, example_inputs=x), path)
    torch.save(x, tmp_path / "x.pt")
    code = (
        "import sys, torch, fxopt\n"
        f"gm = fxopt.load({str(path)!r})\n"
        f"print(gm(torch.load({str(tmp_path / 'x.pt')!r})).tolist())\n"
        "assert 'test_save_load' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    torch.testing.assert_close(torch.tensor(eval(out.stdout)), model(x))


def test_a_graph_with_a_value_it_cannot_write_names_the_node(tmp_path: Path) -> None:
    graph_module = fxopt.trace(nn.Linear(2, 2), mode="symbolic")
    node = next(n for n in graph_module.graph.nodes if n.op == "call_function")
    node.kwargs = {"tag": object()}
    with pytest.raises(StorageError, match=f"node '{node.name}' .*cannot save a value of type object"):
        fxopt.save(graph_module, tmp_path / "bad.fxopt")


def test_a_file_not_written_by_fxopt_is_refused(tmp_path: Path) -> None:
    torch.save({"weights": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(StorageError, match="not a file written by fxopt.save"):
        fxopt.load(tmp_path / "other.pt")


def test_a_cache_output_loads_in_a_fresh_process_without_the_models_module(tmp_path: Path) -> None:
    # pytree knows transformers' Cache classes only once registered: loading registers them
    # from the names the file holds, and never imports the model's own module (gpt2).
    model, traced, inputs = _trace("GPT-2")
    path = tmp_path / "gpt2.fxopt"
    fxopt.save(fxopt.preset("default")(traced), path)
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected = model(**inputs)
    torch.save(_leaves(expected), tmp_path / "expected.pt")
    code = (
        "import sys, torch, fxopt\n"
        f"gm = fxopt.load({str(path)!r})\n"
        f"out = gm(**torch.load({str(tmp_path / 'inputs.pt')!r}))\n"
        "leaves = [x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]\n"
        f"for a, b in zip(leaves, torch.load({str(tmp_path / 'expected.pt')!r}), strict=True):\n"
        "    torch.testing.assert_close(a, b)\n"
        "assert type(out.past_key_values).__name__ == 'DynamicCache'\n"
        "assert 'transformers.models.gpt2.modeling_gpt2' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
