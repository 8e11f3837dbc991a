"""Graphs accept what the model accepts: layouts and dtypes of inputs (issue 9, point 2).

Two cases found by running Optimum's tests and models outside the coverage matrix: GroupViT
called with the float attention mask Optimum's test passes, after tracing on invented (int64)
inputs; Pegasus traced on a sliced, non-contiguous `decoder_input_ids`.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
import transformers

import fxopt
from conftest import build_model, tiny_seq2seq_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def trace_quietly(model: torch.nn.Module, **kwargs: object) -> torch.fx.GraphModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fxopt.trace(model, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pegasus() -> transformers.PegasusModel:
    config = tiny_seq2seq_config(transformers.PegasusConfig)
    return build_model(transformers.PegasusModel, config)


@pytest.mark.parametrize("mode", ["auto", "dynamo", "export"])
def test_pegasus_traced_on_a_sliced_decoder_input_takes_any_layout(
    pegasus: transformers.PegasusModel, mode: str
) -> None:
    ids = torch.randint(0, 100, (2, 10))
    sliced = {"input_ids": ids, "decoder_input_ids": ids[:, :7]}
    assert not sliced["decoder_input_ids"].is_contiguous()
    graph_module = trace_quietly(pegasus, example_inputs=sliced, mode=mode)
    contiguous = {"input_ids": ids, "decoder_input_ids": ids[:, :7].contiguous()}
    for inputs in (sliced, contiguous):
        report = fxopt.verify(pegasus, graph_module, inputs)
        assert report.ok, str(report)


def test_verify_hands_over_inputs_with_their_dtype_and_strides() -> None:
    class Layout(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tensor([*x.stride(), x.is_contiguous(), x.dtype == torch.int32])

    seen: list[torch.Tensor] = []

    def candidate(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return Layout()(x)

    base = torch.arange(20, dtype=torch.int32).reshape(2, 10)
    sliced = base[:, :7]
    report = fxopt.verify(Layout(), candidate, (sliced,))
    assert report.ok, str(report)
    assert seen[0].stride() == (10, 1) and seen[0].dtype == torch.int32
    assert seen[0].data_ptr() != sliced.data_ptr()  # still a private copy
    seen[0].zero_()
    assert torch.equal(sliced, base[:, :7]) and sliced.sum() > 0


@pytest.fixture(scope="module")
def groupvit() -> transformers.GroupViTModel:
    config = transformers.GroupViTConfig(
        text_config=dict(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=32,
            bos_token_id=0,
            eos_token_id=1,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=37,
            depths=[2, 2],
            num_hidden_layers=4,
            num_group_tokens=[4, 0],
            num_output_groups=[4, 4],
            num_attention_heads=4,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=32,
        projection_intermediate_dim=32,
    )
    return build_model(transformers.GroupViTModel, config)


def test_groupvit_graph_takes_the_float_mask_optimum_passes(
    groupvit: transformers.GroupViTModel,
) -> None:
    # Traced from invented inputs (an int64 mask), called as Optimum's test calls it.
    names = ["input_ids", "attention_mask", "pixel_values"]
    graph_module = trace_quietly(groupvit, input_names=names)
    assert graph_module.meta["fxopt_trace"]["mode"] == "sized"
    inputs = {
        "input_ids": torch.randint(0, 100, (2, 32)),
        "attention_mask": torch.ones(2, 32),
        "pixel_values": torch.randn(2, 3, 32, 32),
    }
    report = fxopt.verify(groupvit, graph_module, inputs)
    assert report.ok, str(report)
    long_mask = inputs | {"attention_mask": torch.ones(2, 32, dtype=torch.long)}
    report = fxopt.verify(groupvit, graph_module, long_mask)
    assert report.ok, str(report)


class Branchy(torch.nn.Module):
    """Takes a branch by the feature size: Dynamo fixes that size in the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2 if x.shape[-1] == 8 else x - 1
        return self.fc(y)


def test_a_dynamo_graph_refuses_a_shape_it_cannot_take_naming_input_got_and_expected() -> None:
    model = Branchy().eval()
    graph_module = trace_quietly(model, example_inputs=(torch.randn(3, 8),), mode="dynamo")
    for batch in (3, 5):  # the batch dimension stays free
        x = torch.randn(batch, 8)
        torch.testing.assert_close(graph_module(x), model(x))
    for bad in (torch.randn(3, 7), torch.randn(8), torch.randn(2, 3, 8)):
        with pytest.raises(AssertionError) as caught:
            graph_module(bad)
        message = str(caught.value)
        assert "fxopt: input 'x' must have shape [*, 8] (* is any size; traced on float32)" in message
        assert message.endswith(f"got\", {bad.shape})")


def test_input_checks_survive_optimization_copies_and_saving(tmp_path: Path) -> None:
    model = Branchy().eval()
    graph_module = trace_quietly(model, example_inputs=(torch.randn(3, 8),), mode="dynamo")
    optimized = fxopt.optimize(graph_module, preset="all-preserving")
    x = torch.randn(4, 8)
    torch.testing.assert_close(optimized(x), model(x))
    torch.save(copy.deepcopy(optimized), tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    torch.testing.assert_close(loaded(x), model(x))
    for module in (optimized, loaded):
        with pytest.raises(AssertionError, match=r"fxopt: input 'x' must have shape \[\*, 8\]"):
            module(torch.randn(3, 7))
