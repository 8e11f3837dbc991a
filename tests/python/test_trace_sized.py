"""fxopt.trace(mode="sized"): symbolic tracing with the example's sizes. It traces the Python
symbolic_trace cannot (a size read as a number), keeps batch dimensions symbolic, checks in the
graph what depends on a dynamic size, refuses what depends on tensor data, and `auto` uses it for
models with floating-point inputs only."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from torch import nn

import fxopt
from conftest import build_model, cache_key, tiny_bert, tiny_gpt2_config, token_inputs  # noqa: F401  (fixture)
from fxopt.tracing.trace import TraceError, TraceWarning


def mobilenet_v2() -> transformers.MobileNetV2ForImageClassification:
    config = transformers.MobileNetV2Config(
        image_size=32, depth_multiplier=0.25, min_depth=4, tf_padding=True, num_labels=5
    )
    return build_model(transformers.MobileNetV2ForImageClassification, config)


def checks(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.find_nodes(op="call_function", target=torch._assert)]


class BranchOnBatch(nn.Module):
    """Python that takes one path for batches of more than two rows."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            return self.linear(x) * 2
        return self.linear(x) + 1


class BranchOnData(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


class CountsCalls(nn.Module):
    """State a forward writes on its module: not in any graph fx records."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


class ReadsSizes(nn.Module):
    """A feature size read as a number and the batch's rows counted by len()."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = int(x.shape[-1])
        rows = [self.linear(x[i]) for i in range(len(x))]
        return torch.stack(rows).reshape(-1, features)


def test_a_size_read_as_a_number_traces_and_the_graph_takes_other_batches() -> None:
    """transformers' MobileNetV2 computes TensorFlow padding with int(shape): symbolic tracing
    fails on it, auto traces it sized (module-level graph, no check: every size Python read is
    fixed by the image size), and the graph computes the model at other batch sizes."""
    model = mobilenet_v2()
    pixels = torch.randn(1, 3, 32, 32)
    with pytest.warns(TraceWarning, match="with sized, because torch.fx's symbolic tracing"):
        gm = fxopt.trace(model, example_inputs={"pixel_values": pixels})
    info = gm.meta["fxopt_trace"]
    assert info["mode"] == "sized" and info["dynamic_dims"] == {"pixel_values": [0]}
    assert "symbolic: " in (info["fallback_reason"] or "")
    convs = [n for n in gm.graph.nodes if n.op == "call_module" and isinstance(gm.get_submodule(n.target), nn.Conv2d)]
    assert len(convs) == sum(isinstance(m, nn.Conv2d) for m in model.modules())
    # Every value carries its fake tensor, batch symbolic.
    assert all(isinstance(n.meta["val"].shape[0], torch.SymInt) for n in convs)
    # The only checks are the input's (rank, then the fixed channels / height / width).
    assert len(checks(gm)) == 2
    with torch.no_grad():
        for batch in (1, 3):
            x = torch.randn(batch, 3, 32, 32)
            torch.testing.assert_close(gm(x).logits, model(x).logits, rtol=0, atol=0)
            torch.testing.assert_close(gm(pixel_values=x).logits, model(pixel_values=x).logits, rtol=0, atol=0)
    assert type(gm(pixels)) is type(model(pixels))


def test_python_that_depends_on_a_dynamic_size_is_checked_in_the_graph() -> None:
    model = BranchOnBatch().eval()
    gm = fxopt.trace(model, example_inputs=(torch.randn(4, 4),), mode="sized")
    assert gm.meta["fxopt_trace"]["dynamic_dims"] == {"x": [0]}
    with torch.no_grad():
        x = torch.randn(5, 4)
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
        # A batch that would take the other path is refused, naming the model's line.
        with pytest.raises(AssertionError, match=r"traced where .* is True \(test_trace_sized.py:\d+ in forward: if x.shape\[0\] > 2:\)"):
            gm(torch.randn(2, 4))


def test_a_dynamic_size_python_counts_with_is_fixed_as_dynamo_fixes_it() -> None:
    """len(x) makes the batch a number: the graph then takes that batch only, and says so at its
    input check; the feature size int() read was fixed anyway (no check of its own)."""
    model = ReadsSizes().eval()
    gm = fxopt.trace(model, example_inputs=(torch.randn(3, 6),), mode="sized")
    assert gm.meta["fxopt_trace"]["dynamic_dims"] == {}
    assert len(checks(gm)) == 2  # the input's rank and sizes
    assert len(gm.graph.find_nodes(op="call_module", target="linear")) == 3
    with torch.no_grad():
        x = torch.randn(3, 6)
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
        with pytest.raises(AssertionError, match=r"input 'x' must have shape \[3, 6\]"):
            gm(torch.randn(4, 6))


def test_python_that_depends_on_tensor_data_is_refused() -> None:
    with pytest.raises(TraceError, match=r"sized: fxopt.tracing.sized.ValueDependentError: bool\(\) of the tensor"):
        fxopt.trace(BranchOnData().eval(), example_inputs=(torch.randn(2, 3),), mode="sized")


def test_a_graph_that_misses_python_state_is_not_used() -> None:
    model = CountsCalls().eval()
    with pytest.raises(TraceError, match="does not give the model's outputs on the example inputs"):
        fxopt.trace(model, example_inputs=(torch.randn(2, 3),), mode="sized")


class Scaled(nn.Module):
    def forward(self, x: torch.Tensor, scales: list[float]) -> torch.Tensor:
        return x[: int(x.shape[0])] * scales[0]  # a size read as a number: symbolic fails


def test_inputs_the_check_could_change_are_refused() -> None:
    """The check runs the model: an input other than tensors and plain values (a cache object)
    could come back changed, so the sized tracer refuses it and auto goes to Dynamo."""
    inputs = {"x": torch.randn(2, 3), "scales": [2.0]}
    with pytest.raises(TraceError, match="an input other than tensors and plain values"):
        fxopt.trace(Scaled().eval(), example_inputs=inputs, mode="sized")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        gm = fxopt.trace(Scaled().eval(), example_inputs=inputs)
    assert gm.meta["fxopt_trace"]["mode"] == "dynamo"


def test_auto_traces_token_models_sized_and_their_graph_takes_any_batch_and_length(tiny_bert) -> None:  # noqa: F811
    inputs = token_inputs(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        gm = fxopt.trace(tiny_bert, example_inputs=inputs)
    info = gm.meta["fxopt_trace"]
    assert info["mode"] == "sized" and info["dynamic_dims"] == {"input_ids": [0, 1], "attention_mask": [0, 1]}
    linears = [n for n in gm.graph.nodes if n.op == "call_module" and isinstance(gm.get_submodule(n.target), nn.Linear)]
    assert len(linears) == 2 * 6 + 1
    for node in linears:  # values made, not computed: batch (and length) symbolic, features fixed
        value, module = node.meta["val"], gm.get_submodule(node.target)
        assert all(isinstance(size, torch.SymInt) for size in value.shape[:-1])
        assert value.shape[-1] == module.out_features and value.dtype == torch.float32
    # The model's names: its state dict loads into the graph and back (fx's own GraphModule
    # would hold only what the graph reads, non-persistent buffers as persistent).
    assert list(gm.state_dict()) == list(tiny_bert.state_dict())
    gm.load_state_dict(tiny_bert.state_dict())
    # sdpa_attention's `q_length > 1` differs only for one token: no check (a Dynamo graph
    # takes one token too), so a one-token text runs.
    assert len(checks(gm)) == 2  # each input's rank; every size is free
    with torch.no_grad():
        for batch, length in ((2, 8), (3, 5), (1, 11), (1, 1)):
            x = token_inputs(batch, length)
            torch.testing.assert_close(
                gm(**x).last_hidden_state, tiny_bert(**x).last_hidden_state, rtol=0, atol=0
            )


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_causal_lm_traces_sized_with_its_cache_and_copies_layers_where_none_is_kept(use_cache: bool) -> None:
    # Its key/value cache object holds every layer's values: those layers are traced, not
    # copied (a copy's values would be missing from the cache), and the graph gives the cache.
    model = build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config(n_layer=4, use_cache=use_cache))
    gm = fxopt.trace(model, example_inputs=token_inputs(2, 8), mode="sized")
    assert gm.meta["fxopt_trace"]["copied_layers"] == ({} if use_cache else {"transformer.h": 2})
    with torch.no_grad():
        for batch, length in ((2, 8), (3, 5), (1, 1)):
            x = token_inputs(batch, length)
            ours, theirs = gm(**x), model(**x)
            assert (cache_key(ours) in ours) == use_cache
            if use_cache:
                assert type(ours[cache_key(ours)]) is type(theirs[cache_key(theirs)])
            leaves = zip(torch.utils._pytree.tree_leaves(ours), torch.utils._pytree.tree_leaves(theirs), strict=True)
            assert all(torch.equal(a, b) for a, b in leaves)


def test_a_sliding_window_cache_keeps_its_length_symbolic() -> None:
    """Mistral's cache layers keep how many tokens they have seen, a size of the input: the graph
    returns it (transformers' flattener asks the size whether it is a constant), and at another
    length the cache is the model's, that count included."""
    config = transformers.MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=4, max_position_embeddings=64,
    )  # fmt: skip
    model = build_model(transformers.MistralModel, config)
    gm = fxopt.trace(model, example_inputs=token_inputs(2, 8, vocab_size=64))
    assert gm.meta["fxopt_trace"]["mode"] == "sized"
    with torch.no_grad():
        for batch, length in ((2, 8), (1, 3), (3, 11)):
            x = token_inputs(batch, length, vocab_size=64)
            ours, theirs = gm(**x), model(**x)
            flat, spec = torch.utils._pytree.tree_flatten(ours)
            their_flat, their_spec = torch.utils._pytree.tree_flatten(theirs)
            assert spec == their_spec  # the seen-token counts, constants of the flattened spec
            assert all(torch.equal(a, b) for a, b in zip(flat, their_flat, strict=True))


class MakesAModule(nn.Module):
    """Makes a module as it runs and computes with a fixed size: DistilBERT's `nn.ReLU()(x)`,
    DeBERTa's `torch.tensor(q.size(-1))`."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float))
        return nn.ReLU()(self.fc(x)) / scale


def test_a_module_made_in_forward_is_traced_through_and_a_fixed_size_is_a_number() -> None:
    model = MakesAModule().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        gm = fxopt.trace(model, example_inputs=(torch.randn(3, 4),))
    assert gm.meta["fxopt_trace"]["mode"] == "sized"
    assert [n.target for n in gm.graph.find_nodes(op="call_module")] == ["fc"]
    assert gm.graph.find_nodes(op="call_function", target=torch.nn.functional.relu)
    # x.size(-1) is 4, not a read of it; the scale computed from it is a constant of the graph
    # (the input check reads the sizes, whole).
    assert all(len(n.args) == 1 for n in gm.graph.find_nodes(op="call_method", target="size"))
    assert not gm.graph.find_nodes(op="call_function", target=torch.sqrt)
    with torch.no_grad():
        x = torch.randn(5, 4)
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)


class OnesOfItsSizes(nn.Module):
    """BART's `torch.ones(batch_size, length)` on the input's (dynamic) sizes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape[:2]
        return x * torch.ones(batch, length, 1, device=x.device)


def test_a_factory_function_of_dynamic_sizes_is_recorded_with_them() -> None:
    model = OnesOfItsSizes().eval()
    gm = fxopt.trace(model, example_inputs=(torch.randn(2, 3, 4),), mode="sized")
    assert gm.meta["fxopt_trace"]["dynamic_dims"] == {"x": [0]}
    (ones,) = gm.graph.find_nodes(op="call_function", target=torch.ones)
    assert [isinstance(size, torch.SymInt) for size in ones.meta["val"].shape] == [True, False, False]
    x = torch.randn(5, 3, 4)
    torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
    assert torch.ones(2, 3).shape == (2, 3)  # torch's own function again after the trace
    # Its code registers no wrapped name (fx's `wrap("torch.ones")` broke every later trace).
    gm.recompile()
    assert "wrap(" not in gm.code
    torch.fx.symbolic_trace(nn.Linear(2, 2))


def test_optimize_runs_the_presets_on_a_sized_graph_and_reverse_restores_it() -> None:
    model = mobilenet_v2()
    pixels = torch.randn(2, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = fxopt.trace(model, example_inputs={"pixel_values": pixels})
        optimized = fxopt.optimize(gm, "default")
    assert gm.meta["fxopt_trace"]["mode"] == "sized"
    # Every batch norm folded into its convolution (module calls, as symbolic traces have them).
    norms = [n for n in gm.graph.nodes if n.op == "call_module" and isinstance(gm.get_submodule(n.target), nn.BatchNorm2d)]
    assert len(norms) == sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) > 0
    assert not any(n.op == "call_module" and isinstance(optimized.get_submodule(n.target), nn.BatchNorm2d) for n in optimized.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(optimized(pixels).logits, model(pixels).logits, rtol=1e-4, atol=1e-4)
    restored = fxopt.preset("default")(optimized, reverse=True)
    assert restored.code == gm.code
    with torch.no_grad():
        torch.testing.assert_close(restored(pixels).logits, model(pixels).logits, rtol=0, atol=0)
