"""fxopt.trace: both graph dialects, the auto fallback, dynamic sizes, drop-in outputs, errors."""

from __future__ import annotations

import copy
import operator
import warnings
from typing import Any

import pytest
import torch
import transformers
from torch import nn

import fxopt
from fxopt.tracing import sizes_of_one
from fxopt.tracing import trace as trace_module
from fxopt.tracing.dummy_inputs import build_dummy_inputs, default_input_names
from fxopt.tracing.trace import TRACE_META_KEY, TraceError, TraceWarning

from conftest import build_model, cache_key, tiny_bert_config, tiny_seq2seq_config, token_inputs


class ConvNet(nn.Module):
    """Conv2d -> BatchNorm2d -> ReLU -> pool -> Linear: the layers the Optimum passes target."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


class Scaled(nn.Module):
    """Optional arguments whose values change the graph: what concrete_args exist for."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 2.0
    ) -> torch.Tensor:
        out = self.fc(x) * scale
        if bias is not None:
            out = out + bias
        return out


class ValueBranch(nn.Module):
    """Branches on a tensor's value: symbolic tracing cannot, and export cannot either."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return y - 1


class ShapeBranch(nn.Module):
    """Python control flow on a size: symbolic tracing fails, export traces it on the example."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            return self.fc(x)
        return x


def eager_matches(model: nn.Module, traced: nn.Module, inputs: Any) -> None:
    report = fxopt.verify(model, traced, inputs)
    assert report.ok, str(report)


def meta(graph_module: torch.fx.GraphModule) -> dict[str, Any]:
    return graph_module.meta[TRACE_META_KEY]


def aten_targets(graph_module: torch.fx.GraphModule) -> list[torch._ops.OpOverload]:
    nodes = [n for n in graph_module.graph.nodes if n.op == "call_function"]
    return [n.target for n in nodes if isinstance(n.target, torch._ops.OpOverload)]


@pytest.fixture(scope="module")
def traced_bert(tiny_bert: transformers.BertModel) -> torch.fx.GraphModule:
    return fxopt.trace(tiny_bert, mode="export")


@pytest.fixture(scope="module")
def traced_gpt2(tiny_gpt2: transformers.GPT2LMHeadModel) -> torch.fx.GraphModule:
    return fxopt.trace(tiny_gpt2, mode="export")


# --- symbolic ---------------------------------------------------------------------------------


def test_symbolic_trace_gives_module_level_graph() -> None:
    model = ConvNet().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto must not fall back or warn when symbolic works
        traced = fxopt.trace(model)
    modules = dict(traced.named_modules())
    called = {type(modules[n.target]) for n in traced.graph.find_nodes(op="call_module")}
    assert {nn.Conv2d, nn.BatchNorm2d, nn.Linear} <= called
    assert meta(traced)["mode"] == "symbolic"
    assert meta(traced)["fallback_reason"] is None
    eager_matches(model, traced, torch.randn(2, 3, 8, 8))
    eager_matches(model, traced, torch.randn(5, 3, 13, 11))  # symbolic graphs are size-agnostic


def test_symbolic_input_names_fix_other_parameters_to_defaults() -> None:
    model = Scaled().eval()
    x, bias = torch.randn(3, 4), torch.randn(4)

    only_x = fxopt.trace(model, input_names=["x"], mode="symbolic")
    assert operator.add not in {n.target for n in only_x.graph.nodes}  # `bias is None` was fixed
    torch.testing.assert_close(only_x(x), model(x))

    with_bias = fxopt.trace(model, input_names=["x", "bias"], mode="symbolic")
    assert operator.add in {n.target for n in with_bias.graph.nodes}
    torch.testing.assert_close(with_bias(x, bias), model(x, bias))
    assert meta(with_bias)["input_names"] == ["x", "bias"]


def test_input_names_are_ordered_like_forward() -> None:
    traced = fxopt.trace(Scaled(), input_names=["bias", "x"], mode="symbolic")
    assert meta(traced)["input_names"] == ["x", "bias"]


def test_bad_input_name_raises_value_error_listing_valid_names() -> None:
    expected = r"'nope' is not a parameter of Scaled\.forward; valid names: x, bias, scale"
    with pytest.raises(ValueError, match=expected):
        fxopt.trace(Scaled(), input_names=["x", "nope"])


def test_required_parameter_cannot_be_left_out() -> None:
    with pytest.raises(ValueError, match="requires 'x'"):
        fxopt.trace(Scaled(), input_names=["bias"], mode="symbolic")


def test_example_inputs_must_match_input_names() -> None:
    with pytest.raises(ValueError, match="example_inputs provide"):
        fxopt.trace(
            Scaled(), input_names=["x", "bias"], example_inputs=(torch.randn(2, 4),), mode="export"
        )


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        fxopt.trace(ConvNet(), mode="jit")  # type: ignore[arg-type]


# --- export -----------------------------------------------------------------------------------


def test_export_bert_gives_aten_graph_with_weights_as_get_attr(
    tiny_bert: transformers.BertModel, traced_bert: torch.fx.GraphModule
) -> None:
    assert isinstance(traced_bert, torch.fx.GraphModule)
    attributes = {n.target for n in traced_bert.graph.find_nodes(op="get_attr")}
    assert "embeddings.word_embeddings.weight" in attributes
    assert "encoder.layer.1.output.dense.weight" in attributes
    targets = aten_targets(traced_bert)
    assert targets and all(t.namespace == "aten" for t in targets)
    assert torch.ops.aten.linear.default in targets
    # Export inlines every submodule; only torch's input guard stays a call_module.
    module_calls = traced_bert.graph.find_nodes(op="call_module")
    called = {type(traced_bert.get_submodule(n.target)) for n in module_calls}
    assert not called & {nn.Linear, nn.Embedding, nn.LayerNorm}
    eager_matches(tiny_bert, traced_bert, token_inputs(2, 8))


def test_export_gpt2_with_cache_output(
    tiny_gpt2: transformers.GPT2LMHeadModel, traced_gpt2: torch.fx.GraphModule
) -> None:
    attributes = {n.target for n in traced_gpt2.graph.find_nodes(op="get_attr")}
    assert "transformer.h.0.attn.c_attn.weight" in attributes
    assert torch.ops.aten.addmm.default in aten_targets(traced_gpt2)  # GPT-2's Conv1D is addmm
    inputs = token_inputs(2, 8)
    eager, traced = tiny_gpt2(**inputs), traced_gpt2(**inputs)
    assert type(traced) is type(eager)
    key = cache_key(eager)
    assert type(traced[key]) is type(eager[key])
    assert len(traced[key].layers) == tiny_gpt2.config.n_layer
    report = fxopt.verify(tiny_gpt2, traced_gpt2, inputs)
    assert report.ok, str(report)
    names = [row.name for row in report.rows]
    assert names[0] == "logits"
    assert (
        sum(name.startswith(f"{key}.") for name in names) == 2 * tiny_gpt2.config.n_layer
    )


def test_traced_module_is_a_drop_in_for_eager(
    tiny_bert: transformers.BertModel, traced_bert: torch.fx.GraphModule
) -> None:
    inputs = token_inputs(2, 8)
    eager, traced = tiny_bert(**inputs), traced_bert(**inputs)
    assert type(traced) is type(eager)
    torch.testing.assert_close(traced.last_hidden_state, eager.last_hidden_state)
    torch.testing.assert_close(traced["pooler_output"], eager["pooler_output"])
    assert list(traced.keys()) == list(eager.keys())
    positional = traced_bert(inputs["input_ids"], inputs["attention_mask"])  # forward's order
    torch.testing.assert_close(positional.last_hidden_state, eager.last_hidden_state)


@pytest.mark.parametrize("batch, length", [(3, 13), (1, 5), (4, 64)])
def test_export_graph_runs_other_sizes_than_the_example(
    tiny_bert: transformers.BertModel,
    traced_bert: torch.fx.GraphModule,
    tiny_gpt2: transformers.GPT2LMHeadModel,
    traced_gpt2: torch.fx.GraphModule,
    batch: int,
    length: int,
) -> None:
    assert meta(traced_bert)["dynamic_dims"] == {"input_ids": [0, 1], "attention_mask": [0, 1]}
    assert meta(traced_bert)["fixed_sizes"] == {}
    eager_matches(tiny_bert, traced_bert, token_inputs(batch, length))
    eager_matches(tiny_gpt2, traced_gpt2, token_inputs(batch, length))


def test_export_graph_still_refuses_sizes_the_model_cannot_take(
    traced_bert: torch.fx.GraphModule,
) -> None:
    too_long = token_inputs(2, 65)  # tiny BERT has 64 positions
    with pytest.raises(AssertionError, match="input_ids"):
        traced_bert(**too_long)


def test_export_graph_can_be_edited_and_recompiled(
    tiny_bert: transformers.BertModel, traced_bert: torch.fx.GraphModule
) -> None:
    edited = copy.deepcopy(traced_bert)
    (tanh,) = edited.graph.find_nodes(op="call_function", target=torch.ops.aten.tanh.default)
    with edited.graph.inserting_after(tanh):
        doubled = edited.graph.call_function(torch.ops.aten.mul.Tensor, (tanh, 2.0))
    tanh.replace_all_uses_with(doubled, delete_user_cb=lambda user: user is not doubled)
    edited.recompile()
    inputs = token_inputs(3, 7)
    out, eager = edited(**inputs), tiny_bert(**inputs)
    assert type(out) is type(eager)
    torch.testing.assert_close(out.pooler_output, 2 * eager.pooler_output)
    torch.testing.assert_close(out.last_hidden_state, eager.last_hidden_state)


def test_export_with_positional_example_inputs() -> None:
    model = ConvNet().eval()
    traced = fxopt.trace(
        model, example_inputs=(torch.randn(2, 3, 8, 8),), mode="export", dynamic="all"
    )
    assert meta(traced)["input_names"] == ["x"]
    assert meta(traced)["dynamic_dims"] == {"x": [0, 2, 3]}
    assert torch.ops.aten.conv2d.default in aten_targets(traced)
    eager_matches(model, traced, torch.randn(3, 3, 10, 6))


@pytest.mark.parametrize("mode", ["dynamo", "export"])
def test_image_height_and_width_vary_only_with_dynamic_all(mode: str) -> None:
    # Dynamic resolutions cost 20x in tracing window-attention models (a Swin: 30 s against
    # 1.5 s), so by default only an image's batch varies; the caller's tensor is not marked.
    model = ConvNet().eval()
    example = torch.randn(2, 3, 8, 8)
    traced = fxopt.trace(model, example_inputs=example, mode=mode)
    assert meta(traced)["dynamic_dims"] == {"x": [0]}
    assert meta(traced)["fixed_sizes"] == {}  # fixed by request, not against it: no warning
    assert not hasattr(example, "_dynamo_static_indices")
    eager_matches(model, traced, torch.randn(3, 3, 8, 8))
    with pytest.raises(AssertionError):
        traced(torch.randn(2, 3, 10, 6))

    free = fxopt.trace(model, example_inputs=example, mode=mode, dynamic="all")
    assert meta(free)["dynamic_dims"] == {"x": [0, 2, 3]}
    eager_matches(model, free, torch.randn(3, 3, 10, 6))


def test_dynamo_graph_refuses_another_resolution_saying_how_to_trace_one() -> None:
    model = ConvNet().eval()
    traced = fxopt.trace(model, example_inputs=torch.randn(2, 3, 8, 8), mode="dynamo")
    with pytest.raises(AssertionError) as refused:
        traced(torch.randn(2, 3, 10, 6))
    message = str(refused.value)
    assert "input 'x' must have shape [*, 3, 8, 8]" in message
    assert "torch.Size([2, 3, 10, 6])" in message
    assert "dynamic='all'" in message


def test_dynamo_graph_of_a_batch_of_one_refuses_a_batch_saying_how_to_trace_one(
    tiny_bert: transformers.BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a torch that cannot keep a size of one dynamic (or a model that needs it exactly),
    # Dynamo fixes the batch of the one sentence or image users have at hand.
    monkeypatch.setattr(sizes_of_one, "_config", lambda: None)
    model = ConvNet().eval()
    traced = fxopt.trace(model, example_inputs=torch.randn(1, 3, 8, 8), mode="dynamo")
    eager_matches(model, traced, torch.randn(1, 3, 8, 8))
    with pytest.raises(AssertionError) as refused:
        traced(torch.randn(4, 3, 8, 8))
    message = str(refused.value)
    assert "input 'x' must have shape [1, 3, 8, 8]" in message
    assert "trace on an example of 2 or more there" in message and "dynamic='all'" in message
    text = fxopt.trace(tiny_bert, example_inputs=token_inputs(1, 9), mode="dynamo")
    with pytest.raises(AssertionError, match=r"must have shape \[1, \*\].*example of 2 or more"):
        text(**token_inputs(4, 9))
    # An example of two keeps the batch free: no note.
    assert "example of 2 or more" not in fxopt.trace(model, example_inputs=torch.randn(2, 3, 8, 8), mode="dynamo").code


def test_export_without_dynamic_fixes_the_example_sizes() -> None:
    model = ConvNet().eval()
    traced = fxopt.trace(
        model, example_inputs=torch.randn(2, 3, 8, 8), mode="export", dynamic=False
    )
    assert meta(traced)["dynamic_dims"] == {}
    eager_matches(model, traced, torch.randn(2, 3, 8, 8))
    with pytest.raises(AssertionError):
        traced(torch.randn(3, 3, 8, 8))


def test_sizes_the_model_fixes_are_recorded_and_warned_about() -> None:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
    )
    model = build_model(transformers.ViTModel, config)
    expected = "only accepts these sizes: pixel_values dim 2 = 16; pixel_values dim 3 = 16"
    with pytest.warns(TraceWarning, match=expected):
        traced = fxopt.trace(model, mode="export", dynamic="all")
    info = meta(traced)
    # ViT's patch embedding insists on the configured image size; the batch stays free.
    assert info["fixed_sizes"] == {"pixel_values": {2: config.image_size, 3: config.image_size}}
    assert info["dynamic_dims"] == {"pixel_values": [0]}
    eager_matches(
        model, traced, torch.randn(3, config.num_channels, config.image_size, config.image_size)
    )


def test_failed_dynamic_export_is_retried_static(monkeypatch: pytest.MonkeyPatch) -> None:
    real_export = torch.export.export

    def export_refusing_dynamic_shapes(*args: Any, **kwargs: Any) -> torch.export.ExportedProgram:
        if kwargs.get("dynamic_shapes") is not None:
            raise RuntimeError("dynamic shapes unsupported here")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", export_refusing_dynamic_shapes)
    model = ConvNet().eval()
    example = torch.randn(2, 3, 8, 8)
    expected = "export with dynamic sizes failed: RuntimeError: dynamic shapes unsupported"
    with pytest.warns(TraceWarning, match=expected):
        traced = fxopt.trace(model, example_inputs=example, mode="export")
    info = meta(traced)
    assert info["fixed_sizes"] == {"x": {0: 2}}  # the batch: image sizes are fixed anyway
    assert info["dynamic_dims"] == {}
    assert "dynamic shapes unsupported here" in info["dynamic_failure"]
    eager_matches(model, traced, example)


@pytest.mark.parametrize("mode", ["dynamo", "export"])
def test_an_example_batch_of_one_stays_dynamic(mode: str) -> None:
    # One image is the example users have; the graph must still take a batch (and calibrate on
    # one: fxopt.optimize(..., calibration=batch) failed on the graph's input check).
    model = ConvNet().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        traced = fxopt.trace(model, example_inputs=torch.randn(1, 3, 8, 8), mode=mode)  # type: ignore[arg-type]
    assert meta(traced)["fixed_sizes"] == {}
    assert meta(traced)["dynamic_dims"] == {"x": [0]}
    for batch in (1, 3):
        eager_matches(model, traced, torch.randn(batch, 3, 8, 8))


def test_example_of_size_one_is_reported_as_fixed_where_torch_cannot_keep_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes_of_one, "_config", lambda: None)  # a torch without the option
    model = ConvNet().eval()
    with pytest.warns(TraceWarning, match="use examples of size 2 or more"):
        traced = fxopt.trace(model, example_inputs=torch.randn(1, 3, 8, 8), mode="export")
    assert meta(traced)["fixed_sizes"] == {"x": {0: 1}}


def test_a_trace_that_fails_with_sizes_of_one_dynamic_is_made_again_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.fx.experimental import _config

    real_export = torch.export.export

    def export_needing_the_exact_size(*args: Any, **kwargs: Any) -> torch.export.ExportedProgram:
        if _config.backed_size_oblivious:
            raise RuntimeError("this model branches on its batch being 1")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", export_needing_the_exact_size)
    model = ConvNet().eval()
    with pytest.warns(TraceWarning, match="use examples of size 2 or more"):
        traced = fxopt.trace(model, example_inputs=torch.randn(1, 3, 8, 8), mode="export")
    assert meta(traced)["fixed_sizes"] == {"x": {0: 1}}
    assert meta(traced)["dynamic_failure"] is None
    eager_matches(model, traced, torch.randn(1, 3, 8, 8))


# --- auto -------------------------------------------------------------------------------------


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{what} refused")

    return refuse


def test_auto_falls_back_to_sized_and_says_why(tiny_bert: transformers.BertModel) -> None:
    # In words (issue 21): which tracer and why, no exception text; fallback_reason keeps it.
    with pytest.warns(TraceWarning) as record:
        traced = fxopt.trace(tiny_bert)
    (message,) = [str(w.message) for w in record if issubclass(w.category, TraceWarning)]
    assert message.startswith("fxopt.trace: traced BertModel with sized, because torch.fx's symbolic")
    assert "TypeError" not in message and "Proxy" not in message
    info = meta(traced)
    assert info["mode"] == "sized"
    assert info["fallback_reason"].startswith("symbolic: TypeError: ")
    eager_matches(tiny_bert, traced, token_inputs(3, 11))


def test_auto_falls_back_to_dynamo_when_the_sized_tracer_fails(
    tiny_bert: transformers.BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_module, "trace_sized", _refuse("sized"))
    with pytest.warns(TraceWarning) as record:
        traced = fxopt.trace(tiny_bert)
    (message,) = [str(w.message) for w in record if issubclass(w.category, TraceWarning)]
    assert message.startswith("fxopt.trace: traced BertModel with dynamo, because torch.fx's symbolic")
    info = meta(traced)
    assert info["mode"] == "dynamo"
    assert info["fallback_reason"].startswith("symbolic: TypeError: ")
    assert "; sized: RuntimeError: sized refused" in info["fallback_reason"]
    eager_matches(tiny_bert, traced, token_inputs(3, 11))


def test_auto_falls_back_to_export_when_dynamo_fails(
    tiny_bert: transformers.BertModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_module, "trace_sized", _refuse("sized"))
    monkeypatch.setattr(torch._dynamo, "export", _refuse("dynamo"))
    with pytest.warns(TraceWarning, match="traced BertModel with export") as record:
        traced = fxopt.trace(tiny_bert)
    assert sum(issubclass(w.category, TraceWarning) for w in record) == 1
    info = meta(traced)
    assert info["mode"] == "export"
    assert info["fallback_reason"].startswith("symbolic: TypeError: ")
    assert "; dynamo: RuntimeError: dynamo refused" in info["fallback_reason"]
    eager_matches(tiny_bert, traced, token_inputs(2, 8))


def test_auto_fallback_on_a_plain_module_uses_example_inputs() -> None:
    """A float-input module symbolic tracing cannot follow goes to the sized tracer; with the
    sized tracer refused, to Dynamo."""
    model = ShapeBranch().eval()
    expected = r"traced ShapeBranch with sized, because torch\.fx's symbolic tracing cannot"
    with pytest.warns(TraceWarning, match=expected) as record:
        traced = fxopt.trace(model, example_inputs=torch.randn(3, 4))
    assert sum(issubclass(w.category, TraceWarning) for w in record) == 1
    assert "if x.shape[0] > 1" in meta(traced)["fallback_reason"]
    eager_matches(model, traced, torch.randn(5, 4))

    model.train()  # the sized tracer refuses a model in train mode (its check would run it)
    expected = r"traced ShapeBranch with dynamo, because torch\.fx's symbolic tracing cannot"
    with pytest.warns(TraceWarning, match=expected):
        traced = fxopt.trace(model, example_inputs=torch.randn(3, 4))
    assert meta(traced)["mode"] == "dynamo"


# --- transformers dummy inputs ------------------------------------------------------------------


def test_default_inputs_of_an_encoder_decoder_model_are_traced() -> None:
    config = tiny_seq2seq_config(transformers.BartConfig)
    model = build_model(transformers.BartModel, config)
    assert default_input_names(model) == ["input_ids", "attention_mask", "decoder_input_ids"]
    traced = fxopt.trace(model, mode="export")
    inputs = token_inputs(3, 9) | {"decoder_input_ids": torch.randint(0, 100, (3, 4))}
    eager_matches(model, traced, inputs)


def test_whisper_dummy_features_follow_the_config() -> None:
    config = transformers.WhisperConfig(
        vocab_size=100,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    model = build_model(transformers.WhisperModel, config)
    names = default_input_names(model)
    assert names == ["input_features", "decoder_input_ids"]
    dummy = build_dummy_inputs(model, names)
    # Whisper's encoder halves the frames with a stride-2 conv and requires max_source_positions.
    assert dummy["input_features"].shape[1:] == (
        config.num_mel_bins,
        2 * config.max_source_positions,
    )
    assert int(dummy["decoder_input_ids"].max()) < config.vocab_size
    with pytest.warns(TraceWarning, match="input_features dim 2 = 32"):
        traced = fxopt.trace(model, mode="export")
    features = torch.randn(3, config.num_mel_bins, 2 * config.max_source_positions)
    decoder_input_ids = torch.randint(0, config.vocab_size, (3, 5))
    eager_matches(
        model, traced, {"input_features": features, "decoder_input_ids": decoder_input_ids}
    )


def test_dummy_token_ids_stay_inside_vocab_and_positions() -> None:
    model = build_model(
        transformers.BertModel, tiny_bert_config(vocab_size=7, max_position_embeddings=5)
    )
    dummy = build_dummy_inputs(model, ["input_ids", "token_type_ids", "attention_mask"])
    assert dummy["input_ids"].shape[1] == 5
    assert int(dummy["input_ids"].max()) < 7
    assert (
        dummy["token_type_ids"].shape == dummy["attention_mask"].shape == dummy["input_ids"].shape
    )


def test_dummy_inputs_refuse_unknown_names(tiny_bert: transformers.BertModel) -> None:
    with pytest.raises(ValueError, match="cannot invent a value for input 'encoder_hidden_states'"):
        build_dummy_inputs(tiny_bert, ["encoder_hidden_states"])


# --- errors -----------------------------------------------------------------------------------


def test_untraceable_model_raises_one_trace_error_naming_every_mode() -> None:
    with pytest.raises(TraceError) as caught:
        fxopt.trace(ValueBranch(), example_inputs=torch.randn(2, 3))
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert set(error.failures) == {"symbolic", "dynamo", "export"}
    message = str(error)
    assert "could not trace ValueBranch (tried: symbolic, dynamo, export)" in message
    symbolic = "symbolic: torch.fx.proxy.TraceError: symbolically traced variables cannot be used"
    assert symbolic in message
    assert "dynamo: torch._dynamo.exc.Unsupported: Data-dependent branching" in message
    assert "export: " in message and "data-dependent" in message
    assert message.count("if y.sum() > 0") == 3  # each mode points at the failing source line
    assert error.__cause__ is error.failures["export"]


def test_symbolic_mode_does_not_fall_back() -> None:
    with pytest.raises(TraceError) as caught:
        fxopt.trace(ValueBranch(), mode="symbolic")
    assert set(caught.value.failures) == {"symbolic"}
    assert caught.value.__cause__ is caught.value.failures["symbolic"]


def test_export_of_a_plain_module_needs_example_inputs() -> None:
    with pytest.raises(TraceError, match="needs example_inputs"):
        fxopt.trace(ShapeBranch(), mode="export")


def test_symbolic_trace_keeps_model_output_type() -> None:
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> BaseModelOutputWithPooling:
            h = self.fc(x)
            return BaseModelOutputWithPooling(last_hidden_state=h, pooler_output=h.mean(1))

    model = Encoder().eval()
    gm = fxopt.trace(model, mode="symbolic")
    x = torch.randn(2, 3, 4)
    out, expected = gm(x), model(x)
    assert type(out) is BaseModelOutputWithPooling
    assert torch.equal(out.pooler_output, expected.pooler_output)
    assert list(out.keys()) == ["last_hidden_state", "pooler_output"]
