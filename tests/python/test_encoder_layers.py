"""optimize_model's encoder layers (optimization/layer_forward.py): a BERT layer runs as one graph
(attention, normalisations and Linears together) where that measured faster, checked against the
layer's own code; other calls and layers that do not trace keep their blocks."""

from __future__ import annotations

import pytest
import torch
import transformers

import fxopt
from fxopt.optimization import layer_forward
from fxopt.optimization.layer_forward import LayerForward
from fxopt.optimization.model import OptimizedForward


def tiny_config(**options: object) -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **options
    )


def tiny_bert() -> transformers.BertModel:
    torch.manual_seed(0)
    return transformers.BertModel(tiny_config()).eval()


def batch(rows: int, length: int, padded: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 128, (rows, length), generator=torch.Generator().manual_seed(rows * 100 + length))
    mask = torch.ones_like(ids)
    if padded:
        mask[-1, -padded:] = 0  # the last row padded: the layers get a mask
    return {"input_ids": ids, "attention_mask": mask}


def run(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).last_hidden_state


@pytest.fixture
def rewrites_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every graph measured faster: what runs is then the layer graph, whatever this machine's
    timing says (the timing itself is tuning's, tested there)."""
    monkeypatch.setattr(fxopt.tuning.current(), "prefers_rewrite", lambda *args: True)


def layer_graphs(model: transformers.BertModel) -> list[object]:
    """What each layer ran for its masked calls: the graphs of each size class prepared."""
    out = []
    for layer in model.encoder.layer:
        forward = layer.__dict__["forward"]
        assert isinstance(forward, LayerForward)
        (graphs, _), *others = [g for g in forward.forms.values() if g is not None]
        assert not others
        out.extend(graphs.graphs.values())
    return out


def test_applies_to_encoder_layers_not_to_decoder_layers_or_their_parts() -> None:
    bert = tiny_bert()
    assert layer_forward.applies_to(bert.encoder.layer[0])
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        )
    )
    assert not layer_forward.applies_to(llama.model.layers[0])  # its calls pass positions
    assert not layer_forward.applies_to(bert.encoder.layer[0].intermediate)  # one input: a block
    fxopt.optimize_model(bert)
    # The outermost layer only: BERT's attention inside it has the same signature.
    assert bert.__dict__["_fxopt_encoder_layers"] == ("encoder.layer.0", "encoder.layer.1")
    assert "forward" not in bert.encoder.layer[0].attention.__dict__
    assert isinstance(bert.encoder.layer[0].intermediate.__dict__["forward"], OptimizedForward)
    fxopt.restore_model(llama)


@pytest.mark.parametrize("preset", ["default", "fast"])
def test_a_layer_runs_one_graph_with_its_attention_and_restores(preset: str, rewrites_win: None) -> None:
    model = tiny_bert()
    inputs = batch(3, 12, padded=5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    expected = run(model, inputs)
    fxopt.optimize_model(model, preset)
    got = run(model, inputs)
    cosine = torch.nn.functional.cosine_similarity(got.flatten(1), expected.flatten(1)).min()
    if preset == "default":
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    else:
        assert cosine >= fxopt.optimization.presets.FAST_COSINE
    graphs = layer_graphs(model)
    # This call's class and the many-rows one, both the whole layer in one graph per layer.
    assert len(graphs) == 4
    for graph in graphs:
        code = graph.__self__.code  # type: ignore[attr-defined]
        assert "layer_norm" in code and ("scaled_dot_product_attention" in code or "attention_bf16" in code)
    fxopt.restore_model(model)
    assert not any(isinstance(m.__dict__.get("forward"), (LayerForward, OptimizedForward)) for m in model.modules())
    assert torch.equal(run(model, inputs), expected)
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name


def test_one_trace_serves_every_layer_on_its_own_weights(monkeypatch: pytest.MonkeyPatch, rewrites_win: None) -> None:
    calls = []
    real = layer_forward.trace

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(layer_forward, "trace", counted)
    model = tiny_bert()
    inputs = batch(2, 9, padded=3)
    expected = run(model, inputs)
    fxopt.optimize_model(model)
    torch.testing.assert_close(run(model, inputs), expected, rtol=1e-4, atol=1e-4)
    assert calls == [model.encoder.layer[0]]  # layer 1 reuses it, on its weights: outputs match
    unmasked = batch(2, 9)  # no padding: no mask reaches the layers, another form, one more trace
    expected_unmasked = run(tiny_bert(), unmasked)
    torch.testing.assert_close(run(model, unmasked), expected_unmasked, rtol=1e-4, atol=1e-4)
    assert len(calls) == 2


def test_a_first_call_of_one_text_serves_later_batches_under_inference_mode(rewrites_win: None) -> None:
    """A pipeline calls with one text first (dynamo fixes dimensions of size 1: the layer is
    traced on the batch doubled), then batches; encode() runs under inference_mode."""
    model = tiny_bert()
    reference = tiny_bert()
    fxopt.optimize_model(model)
    for inputs in (batch(1, 7, padded=2), batch(5, 11, padded=4), batch(1, 3, padded=1)):
        with torch.inference_mode():
            got = model(**inputs).last_hidden_state
        torch.testing.assert_close(got, run(reference, inputs), rtol=1e-4, atol=1e-4)
    # Graphs ran (every call's class and many rows'), none specialised to a batch of one.
    assert all(isinstance(getattr(g, "__self__", None), torch.fx.GraphModule) for g in layer_graphs(model))
    (sizes,) = [form[1] for form in model.encoder.layer[0].__dict__["forward"].forms.values() if form]
    assert sizes[0][0] is None and sizes[1][0] is None


def test_a_layer_that_does_not_trace_keeps_its_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> object:
        raise RuntimeError("not traceable here")

    monkeypatch.setattr(layer_forward, "trace", refuse)
    model = tiny_bert()
    inputs = batch(2, 8, padded=2)
    expected = run(model, inputs)
    fxopt.optimize_model(model)
    torch.testing.assert_close(run(model, inputs), expected, rtol=1e-4, atol=1e-4)
    forward = model.encoder.layer[0].__dict__["forward"]
    assert isinstance(forward, LayerForward) and list(forward.forms.values()) == [None]
    # The blocks inside still run their own graphs (prepared on this call).
    assert isinstance(model.encoder.layer[0].intermediate.__dict__["forward"], OptimizedForward)


def test_calls_with_more_than_states_and_mask_run_the_layers_own_forward(rewrites_win: None) -> None:
    """BERT as a decoder: generate() passes the cache, so its layers run their own forwards over
    their blocks, and the greedy tokens stay float32's."""
    torch.manual_seed(0)
    model = transformers.BertLMHeadModel(tiny_config(is_decoder=True)).eval()
    prompt = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    expected = model.generate(prompt, max_new_tokens=8, do_sample=False)
    fxopt.optimize_model(model)
    assert torch.equal(model.generate(prompt, max_new_tokens=8, do_sample=False), expected)
    layer = model.bert.encoder.layer[0].__dict__["forward"]
    assert isinstance(layer, LayerForward) and layer.forms == {}  # never a plain call
    fxopt.restore_model(model)
