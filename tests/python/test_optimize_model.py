"""fxopt.optimize_model / restore_model: generate() on the model object itself, per-block graphs
prepared once per rank (never per decoding step), the original weights saved and restored."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import transformers
from safetensors.torch import load_file

import fxopt
from fxopt.optimization.model import MANY_ROWS, OptimizedForward, optimized_blocks
from fxopt.tracing.train_mode import TrainModeWarning


def tiny_llama() -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def greedy(model: transformers.PreTrainedModel, prompt: torch.Tensor, tokens: int = 16) -> torch.Tensor:
    return model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)


PROMPT = torch.randint(1, 256, (1, 12), generator=torch.Generator().manual_seed(1))


def test_default_preset_generates_the_same_tokens_and_restores_bit_exact() -> None:
    model = tiny_llama()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    expected = greedy(model, PROMPT)
    assert fxopt.optimize_model(model) is model
    blocks = optimized_blocks(model)
    # MLPs are blocks; attention stays eager and its projections are blocks of their own.
    assert "model.layers.0.mlp" in blocks and "model.layers.0.self_attn.q_proj" in blocks
    assert "lm_head" in blocks and "model.layers.0.self_attn" not in blocks
    assert torch.equal(greedy(model, PROMPT), expected)
    assert model.state_dict().keys() == state.keys()
    assert fxopt.restore_model(model) is model
    assert optimized_blocks(model) == ()
    assert not any(isinstance(m.__dict__.get("forward"), OptimizedForward) for m in model.modules())
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name


def test_decode_preset_prepares_each_block_once_and_stays_close() -> None:
    model = tiny_llama()
    expected = greedy(model, PROMPT, 24)
    with torch.no_grad():
        reference = model(expected).logits
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    forwards = [m.forward for m in model.modules() if isinstance(m.__dict__.get("forward"), OptimizedForward)]
    # The calibration prepared the prefill's size class, the one-token steps' and many rows';
    # q, k and v (whose steps the attention's stacked projection runs) no steps' class.
    classes = [len(f.graphs) for f in forwards]
    assert forwards and classes == [3 if f.steps_ahead else 2 for f in forwards] and 2 in classes
    tokens = greedy(model, PROMPT, 24)  # prefill of 12 tokens, then 23 steps of one
    assert [len(f.graphs) for f in forwards] == classes  # no step prepared (traced) anything again
    # Teacher-forced, on the tokens float32 chose: random weights give nearly tied logits, so
    # free-running greedy decoding diverges at the first flipped token and compares nothing after.
    with torch.no_grad():
        logits = model(expected).logits[0]
    cosine = torch.nn.functional.cosine_similarity(logits, reference[0], dim=-1).min()
    declared = fxopt.optimization.presets.get_preset("decode").accuracy
    assert declared is not None and cosine >= declared.min_cosine
    assert (logits.argmax(-1) == reference[0].argmax(-1)).float().mean() >= 0.9
    assert tokens.shape == expected.shape
    fxopt.restore_model(model)
    assert torch.equal(greedy(model, PROMPT, 24), expected)


def test_decode_preset_runs_prompts_with_fast_and_steps_with_weight_only_kernels() -> None:
    """A prompt's graphs run `fast` (bfloat16 where this CPU has it natively), the one-token
    steps' graphs weight-only int8 Linears (Preset.prompts)."""
    model = tiny_llama()
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    forward = model.model.layers[0].mlp.forward
    assert isinstance(forward, OptimizedForward)

    def code(few_rows: bool) -> str:
        (run,) = [run for key, run in forward.graphs.items() if key[2] == few_rows and not key[3]]
        return getattr(run.__self__, "code", "")  # the original forward's module has none

    prompt, step = code(False), code(True)
    assert "_weight_int8pack_mm" in step or "int8_weight_linear" in step
    assert "int8" not in prompt
    bfloat16 = fxopt.optimization.hardware.bfloat16_native(torch.device("cpu"))
    assert ("bfloat16" in prompt) == bfloat16, prompt
    assert fxopt.optimization.presets.get_preset("decode").prompts == "fast"


def test_blocks_whose_graphs_measured_no_faster_get_their_own_forward_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """No wrapper is left on a block with nothing faster to run (a GPU's decoding step is
    Python-bound); a forward set on the instance before (accelerate's hooks) is put back."""
    model = tiny_llama()
    expected = greedy(model, PROMPT)
    mlp = model.model.layers[0].mlp
    own = mlp.forward
    mlp.forward = own  # an instance attribute now, as a hooking library leaves it
    monkeypatch.setattr(fxopt.tuning.current(), "prefers_rewrite", lambda *args: False)
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    assert optimized_blocks(model)  # they were taken over, measured, and given back
    assert not any(isinstance(m.__dict__.get("forward"), OptimizedForward) for m in model.modules())
    assert mlp.__dict__["forward"] == own
    assert torch.equal(greedy(model, PROMPT), expected)
    fxopt.restore_model(model)
    assert mlp.__dict__["forward"] == own and torch.equal(greedy(model, PROMPT), expected)


def test_a_trace_that_computes_otherwise_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic trace fixes what a block reads outside its input (a scale set after
    optimize_model traced it): the first call finds the trace computing otherwise (on the
    prompt's first row) and the block runs its own forward; a block whose trace holds runs its
    graphs."""

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.scale = torch.nn.Linear(16, 16), 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(x) * self.scale

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.changed, self.kept = Scaled(), Scaled()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.kept(self.changed(x))

    monkeypatch.setattr(fxopt.tuning.current(), "prefers_rewrite", lambda *args: True)
    torch.manual_seed(0)
    model, x = Model().eval(), torch.randn(1, 12, 16)
    fxopt.optimize_model(model, "decode")
    assert set(optimized_blocks(model)) == {"changed", "kept"}
    model.changed.scale = 2.0
    with torch.no_grad():
        expected = Scaled.forward(model.kept, Scaled.forward(model.changed, x))
        out = model(x)
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)  # decode's prompts: bfloat16
    assert "forward" not in model.changed.__dict__  # every class prepared ran its own forward
    kept = model.kept.__dict__["forward"]
    assert isinstance(kept, OptimizedForward) and all(run != kept.original for run in kept.graphs.values())
    fxopt.restore_model(model)


def test_a_first_small_call_does_not_decide_for_many_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the rewrite measured slower at a small first call (14 rows: two short sentences)
    and faster at many rows, a later batch of many rows runs the rewrite: the first call
    prepared that class too, on its input repeated, so the block kept its wrapper."""
    model = tiny_llama()
    mlp = model.model.layers[0].mlp

    def faster_at_many_rows(key: str, rewritten: object, unchanged: object) -> bool:
        rows = 1
        for size in json.loads(key)[3][:-1]:
            rows *= size
        return rows > MANY_ROWS

    monkeypatch.setattr(fxopt.tuning.current(), "prefers_rewrite", faster_at_many_rows)
    fxopt.optimize_model(model, "default")
    small, large = torch.randn(2, 7, 64), torch.randn(16, 16, 64)
    with torch.no_grad():
        expected_small, expected_large = type(mlp).forward(mlp, small), type(mlp).forward(mlp, large)
        small_out = mlp(small)  # prepares the small, one-token and many-rows classes
        forward = mlp.__dict__.get("forward")
        assert isinstance(forward, OptimizedForward) and len(forward.graphs) == 3
        graphs = {key[2:]: run for key, run in forward.graphs.items()}
        assert graphs[(False, False)] == forward.original and graphs[(True, False)] == forward.original
        assert graphs[(False, True)] != forward.original
        large_out = mlp(large)
    assert len(forward.graphs) == 3  # nothing prepared again
    torch.testing.assert_close(small_out, expected_small)
    torch.testing.assert_close(large_out, expected_large, rtol=1e-5, atol=1e-5)
    fxopt.restore_model(model)


def test_convolution_stages_are_blocks_and_images_get_no_one_row_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image classifier's stages (one tensor in, convolutions inside) are blocks, so an
    image-classification pipeline runs them optimized; an image's first call prepares no
    "decoding step" class (one row of an image: a 3x3 convolution without padding would fail)."""
    monkeypatch.setattr(fxopt.tuning.current(), "prefers_rewrite", lambda *args: True)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5)
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(config).eval()
    model.head = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3), torch.nn.ReLU())  # padding 0
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, head = model(images).logits, model.head(images)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    fxopt.optimize_model(model)
    blocks = optimized_blocks(model)
    assert {"resnet.encoder.stages.0", "resnet.encoder.stages.1", "head"} <= set(blocks)
    with torch.no_grad():
        torch.testing.assert_close(model(images).logits, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(model.head(images), head, rtol=1e-5, atol=1e-5)
    stage = model.resnet.encoder.stages[0].__dict__["forward"]
    assert isinstance(stage, OptimizedForward)
    assert [key[2] for key in stage.graphs] == [False]  # this call's class only: many rows already
    assert "conv" in stage.graphs[next(iter(stage.graphs))].__self__.code
    fxopt.restore_model(model)
    for name, value in model.state_dict().items():
        assert torch.equal(value, state[name]), name


def test_decoding_presets_run_rmsnorms_through_the_kernel() -> None:
    """Llama's RMSNorms run fxopt's kernel under `decode` (float32, within float32 rounding of
    transformers' eight ops); other inputs run the module's own forward; restore gives it back."""
    from fxopt.optimization.norm_step import RmsNormStep
    from fxopt.runtime.rms_norm import rms_norm

    model = tiny_llama()
    norm = model.model.layers[0].input_layernorm
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)  # not all ones: the weight's product is checked too
        x = torch.randn(3, 5, 64) * 4
        expected = norm(x)
        torch.testing.assert_close(rms_norm(x, norm.weight, norm.variance_epsilon), expected, rtol=2e-6, atol=1e-7)
        with pytest.raises(TypeError, match="float32"):
            rms_norm(x.double(), norm.weight, norm.variance_epsilon)
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    norms = [m for m in model.modules() if isinstance(m.__dict__.get("forward"), RmsNormStep)]
    assert len(norms) == 2 * 2 + 1  # two a layer, and the final one
    with torch.no_grad():
        torch.testing.assert_close(norm(x), expected, rtol=2e-6, atol=1e-7)
        half = x.to(torch.bfloat16)
        assert torch.equal(norm(half), type(norm).forward(norm, half))  # not float32: its own forward
    fxopt.restore_model(model)
    assert not any(isinstance(m.__dict__.get("forward"), RmsNormStep) for m in model.modules())
    with torch.no_grad():
        assert torch.equal(norm(x), expected)


def test_the_in_place_kv_cache_is_for_cpu_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the hook's Python per step cost more than the copies it saves (H200: GPT-2 decoded
    1.20x eager without it, 1.13x with it)."""
    hooked = fxopt.optimize_model(tiny_llama())
    assert "_fxopt_kv_cache_hook" in hooked.__dict__ and hooked._forward_pre_hooks
    monkeypatch.setattr(fxopt.optimization.hardware, "model_device", lambda model: torch.device("cuda"))
    model = tiny_llama()
    expected = greedy(model, PROMPT)
    fxopt.optimize_model(model)
    assert "_fxopt_kv_cache_hook" not in model.__dict__ and not model._forward_pre_hooks
    monkeypatch.undo()
    assert torch.equal(greedy(model, PROMPT), expected)  # a CPU model after all: runs the same
    fxopt.restore_model(model)


def graph_tensors(forward: OptimizedForward, key: tuple[int, torch.dtype, bool, bool]) -> dict[str, torch.Tensor]:
    graph = forward.graphs[key].__self__
    return {name: t for name, t in graph.state_dict(keep_vars=True).items()} | {
        f"{path}.{name}".lstrip("."): value
        for path, module in graph.named_modules()
        for name, value in vars(module).items()
        if isinstance(value, torch.Tensor)
    }


@pytest.mark.parametrize("preset", ["default", "decode"])
def test_graphs_keep_only_the_tensors_they_read_once_per_block(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The float32 weights a pass replaced (by int8 or bfloat16 copies) are not kept: these
    graphs are never reversed. And the view every size class's graph reads a weight through
    (GPT-2's transposed Conv1D weight) is one tensor, on the Conv1D's storage: GPT-2 held 1.0 GB
    of new tensors under `decode` when each class copied its transposes."""
    from conftest import tiny_gpt2_config

    from fxopt.engine.tensor_ops import TorchTensorOps

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(tiny_gpt2_config()).eval()
    prompt = torch.randint(1, 100, (1, 12))
    expected = greedy(model, prompt)
    with torch.no_grad():
        reference = model(prompt).logits
    views: list[torch.Tensor] = []
    view = TorchTensorOps.transposed_view
    monkeypatch.setattr(
        TorchTensorOps, "transposed_view", lambda self, *args: views.append(view(self, *args)) or views[-1]
    )
    fxopt.optimize_model(model, preset, calibration=prompt)
    conv1d = [m for m in model.modules() if type(m).__name__ == "Conv1D"]
    # Each class (prompt, steps, many rows) viewed every Conv1D weight transposed: one view each.
    assert len(views) == 3 * len(conv1d) and len({id(t) for t in views}) == len(conv1d)
    storages = {m.weight.untyped_storage().data_ptr() for m in conv1d}
    assert {t.untyped_storage().data_ptr() for t in views} == storages
    forward = model.transformer.h[0].mlp.forward
    assert isinstance(forward, OptimizedForward)
    # The prompt's class and the steps' (the many-rows class is the prompt's preset again).
    prompt_key, step_key = sorted((key for key in forward.graphs if not key[3]), key=lambda key: key[2])
    held = {key: graph_tensors(forward, key) for key in (prompt_key, step_key)}
    for key, tensors in held.items():
        code = forward.graphs[key].__self__.code
        read = {str(n.target) for n in forward.graphs[key].__self__.graph.nodes if n.op == "get_attr"}
        assert set(tensors) == read, (set(tensors) ^ read, code)
    own = {id(p) for p in model.parameters()}
    made = [{id(t) for t in tensors.values() if id(t) not in own} for tensors in held.values()]
    if preset == "default":  # both graphs read the same transposed float32 weights: one view
        assert made[0] and made[0] == made[1]
    else:  # bfloat16 for prompts, int8 for steps: nothing float32 of the passes' is left
        assert not made[0] & made[1]
        assert all(t.dtype != torch.float32 or id(t) in own for t in held[step_key].values() if t.dim() == 2)
    with torch.no_grad():
        logits = model(prompt).logits
    cosine = torch.nn.functional.cosine_similarity(logits.flatten(), reference.flatten(), dim=0)
    assert cosine > 0.999
    if preset == "default":
        assert torch.equal(greedy(model, prompt), expected)


def test_a_transposed_view_is_reused_only_for_the_same_tensor() -> None:
    """A transposed view shares its tensor's storage, so an in-place update reaches it; within
    views_reused, viewing the same tensor again gives the same view (one oneDNN packing)."""
    from fxopt.engine import tensor_ops

    ops, weight, other = tensor_ops.TorchTensorOps(), torch.randn(4, 6), torch.randn(4, 6)
    assert ops.transposed_view(weight, 0, 1) is not ops.transposed_view(weight, 0, 1)  # outside
    with tensor_ops.views_reused():
        first = ops.transposed_view(weight, 0, 1)
        assert ops.transposed_view(weight, 0, 1) is first and ops.transposed_view(other, 0, 1) is not first
        assert first.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
        with torch.no_grad():
            weight.mul_(2)
        assert ops.transposed_view(weight, 0, 1) is first and torch.equal(first, weight.t())
    assert tensor_ops._views is None
    copied = ops.transpose(weight, 0, 1)  # the copy passes compute new values from
    assert copied.is_contiguous() and copied.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr()


def test_decoding_attention_kernel_matches_sdpa() -> None:
    """One query row per head against a cache buffer's view (room past the rows written),
    grouped-query heads; None where the kernel does not apply."""
    from fxopt.runtime.decode_attention import decode_attention

    torch.manual_seed(0)
    for heads, kv_heads, d in ((12, 12, 64), (8, 2, 64), (4, 1, 80)):
        query = torch.randn(1, heads, 1, d)
        buffer_k, buffer_v = torch.randn(2, 1, kv_heads, 300, d)
        key, value = buffer_k[:, :, :190], buffer_v[:, :, :190]
        expected = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, scale=0.3, enable_gqa=kv_heads != heads
        )
        out = decode_attention(query, key, value, 0.3)
        assert out is not None and out.shape == (1, 1, heads, d)
        torch.testing.assert_close(out, expected.transpose(1, 2), rtol=1e-5, atol=1e-5)
    assert decode_attention(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), 1.0) is None
    assert decode_attention(torch.randn(1, 4, 3, 8), torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8), 1.0) is None
    half = torch.randn(1, 4, 5, 8, dtype=torch.bfloat16)
    assert decode_attention(torch.randn(1, 4, 1, 8, dtype=torch.bfloat16), half, half, 1.0) is None


def test_decoding_presets_run_one_token_attention_through_fxopts_kernel(tmp_path: os.PathLike[str]) -> None:
    """Under `decode` a step's attention is fxopt's kernel (prompts keep SDPA), the logits those
    of the same graphs with SDPA to float32 rounding; restore_model and save_pretrained see the
    model's own attention implementation."""
    from fxopt.runtime import decode_attention

    model, with_sdpa = tiny_llama(), tiny_llama()
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    fxopt.optimize_model(with_sdpa, "decode", calibration=PROMPT)
    assert model.config._attn_implementation == decode_attention.NAME
    with_sdpa.set_attn_implementation("sdpa")
    tokens = greedy(model, PROMPT, 24)
    calls = []
    kernel = decode_attention.decode_attention
    try:
        def counted(*args: torch.Tensor | float) -> torch.Tensor | None:
            out = kernel(*args)  # type: ignore[arg-type]
            calls.append(out is not None)
            return out

        decode_attention.decode_attention = counted  # type: ignore[assignment]
        with torch.no_grad():
            out = model(tokens[:, :12], use_cache=True)
            cache = out.past_key_values
            steps = [model(tokens[:, t : t + 1], past_key_values=cache, use_cache=True).logits for t in range(12, 20)]
    finally:
        decode_attention.decode_attention = kernel
    assert sum(calls) == 8 * model.config.num_hidden_layers  # the steps' ran it, not the prompt's
    with torch.no_grad():
        out = with_sdpa(tokens[:, :12], use_cache=True)
        cache = out.past_key_values
        expected = [with_sdpa(tokens[:, t : t + 1], past_key_values=cache, use_cache=True).logits for t in range(12, 20)]
    torch.testing.assert_close(torch.cat(steps), torch.cat(expected), rtol=1e-4, atol=1e-5)
    model.save_pretrained(tmp_path)
    config = open(os.path.join(tmp_path, "config.json")).read()
    assert decode_attention.NAME not in config
    fxopt.restore_model(model)
    assert model.config._attn_implementation == "sdpa"
    fxopt.optimize_model(with_sdpa := tiny_llama(), "default")
    assert with_sdpa.config._attn_implementation == "sdpa"  # the preserving preset keeps SDPA


def test_save_pretrained_writes_the_original_weights(tmp_path: os.PathLike[str]) -> None:
    model = tiny_llama()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    model.save_pretrained(tmp_path)
    saved = load_file(os.path.join(tmp_path, "model.safetensors"))
    assert not any("int8" in key for key in saved)
    for name, value in saved.items():
        assert torch.equal(value, state[name]), name


def test_optimizing_twice_or_with_an_unknown_preset_is_refused() -> None:
    model = tiny_llama()
    with pytest.raises(Exception, match="unknown preset"):
        fxopt.optimize_model(model, "no-such-preset")
    fxopt.optimize_model(model)
    with pytest.raises(ValueError, match="optimized already"):
        fxopt.optimize_model(model)


def test_the_kv_cache_appends_in_place_with_identical_logits_and_restores() -> None:
    """optimize_model makes the cache passed in append into buffers with room (runtime/kv_cache):
    per step only the new rows are written, the logits of every step are bit-identical to the
    copying cache's (the hook run alone on the eager model), views handed out earlier never
    change (crop, then append again), and restore_model removes the hook."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    from fxopt.runtime.kv_cache import grow_in_place

    model = tiny_llama()
    tokens = greedy(model, PROMPT, 8)

    def stepwise(cache: DynamicCache) -> list[torch.Tensor]:
        with torch.no_grad():
            out = model(tokens[:, :12], past_key_values=cache, use_cache=True)
            logits = [out.logits]
            for t in range(12, tokens.shape[1]):
                out = model(tokens[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
                logits.append(out.logits)
        return logits

    expected = stepwise(DynamicCache(config=model.config))
    cache = DynamicCache(config=model.config)
    grow_in_place(model, (), {"past_key_values": cache})
    assert all(torch.equal(a, b) for a, b in zip(stepwise(cache), expected))
    layer = cache.layers[0]
    assert type(layer).__name__ == "GrowingKVLayer" and isinstance(layer, DynamicLayer)
    keys = layer.keys
    assert keys.shape[-2] == tokens.shape[1] and keys.storage_offset() == 0
    assert keys.untyped_storage().nbytes() > keys.numel() * keys.element_size()  # room to grow
    kept = keys.clone()
    cache.crop(-2)
    with torch.no_grad():
        model(tokens[:, -1:], past_key_values=cache, use_cache=True)
    assert torch.equal(keys, kept)  # the rows an earlier step handed out stay as they were
    assert cache.layers[0].keys.shape[-2] == keys.shape[-2] - 1

    fxopt.optimize_model(model)
    with torch.no_grad():
        fresh = DynamicCache(config=model.config)
        model(tokens[:, :12], past_key_values=fresh, use_cache=True)
    assert type(fresh.layers[0]).__name__ == "GrowingKVLayer"
    fxopt.restore_model(model)
    with torch.no_grad():
        fresh = DynamicCache(config=model.config)
        model(tokens[:, :12], past_key_values=fresh, use_cache=True)
    assert type(fresh.layers[0]) is DynamicLayer


def step_logits(model: transformers.PreTrainedModel, tokens: torch.Tensor, prompt: int = 12) -> torch.Tensor:
    """Logits of a prompt, then of one token per step with the KV cache, as generate() runs them."""
    with torch.no_grad():
        out = model(tokens[:, :prompt], use_cache=True)
        logits = [out.logits[0]]
        for t in range(prompt, tokens.shape[1]):
            out = model(tokens[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits[0])
    return torch.cat(logits)


def without_attention_steps(model: transformers.PreTrainedModel) -> int:
    from fxopt.optimization.attention_step import AttentionStep

    steps = [m.__dict__["forward"] for m in model.modules() if isinstance(m.__dict__.get("forward"), AttentionStep)]
    for step in steps:
        step.uninstall()
    return len(steps)


def tiny_decoder(architecture: str) -> transformers.PreTrainedModel:
    """A two-layer causal LM (Llama-style ones with GQA: 4 heads, 2 kv heads)."""
    if architecture == "llama":
        return tiny_llama()
    sizes = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    torch.manual_seed(0)
    if architecture == "qwen2":  # q, k and v with biases
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**sizes, num_key_value_heads=2)).eval()
    if architecture == "gpt2":  # q, k and v stacked in c_attn already, no rotary embedding
        config = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, pad_token_id=0)
        return transformers.GPT2LMHeadModel(config).eval()
    config = transformers.MistralConfig(**sizes, num_key_value_heads=2, sliding_window=None)
    return transformers.MistralForCausalLM(config).eval()


def attention_modules(model: transformers.PreTrainedModel) -> list[torch.nn.Module]:
    layers = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    return [layer.attn if hasattr(layer, "attn") else layer.self_attn for layer in layers]


@pytest.mark.parametrize(
    ("architecture", "preset"),
    [("llama", "decode"), ("llama", "decode-int4"), ("qwen2", "decode"), ("mistral", "decode"), ("gpt2", "decode")],
)
def test_attention_steps_run_as_one_call_with_the_same_logits(architecture: str, preset: str) -> None:
    """Under the decoding presets an attention module's one-token step runs as one call: q, k and
    v from one block (Llama's three projections stacked; GPT-2's c_attn), the decoding kernel, the
    output projection. The logits of every step are those of the module's own forward (the same
    model with the steps uninstalled), a Llama's projection blocks serve prompts only, and the
    stacked float32 weight is not kept."""
    import gc
    import weakref

    from fxopt.optimization import attention_step

    model, twin = tiny_decoder(architecture), tiny_decoder(architecture)
    stacked: list[weakref.ref[torch.Tensor]] = []
    original_init = attention_step._StackedProjections.__init__

    def recorded(self: attention_step._StackedProjections, attention: torch.nn.Module) -> None:
        original_init(self, attention)
        stacked.append(weakref.ref(self.proj.weight))

    attention_step._StackedProjections.__init__ = recorded  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TrainModeWarning)  # the stacked block is traced in eval
            fxopt.optimize_model(model, preset, calibration=PROMPT)
    finally:
        attention_step._StackedProjections.__init__ = original_init  # type: ignore[method-assign]
    fxopt.optimize_model(twin, preset, calibration=PROMPT)
    layers = model.config.num_hidden_layers
    assert without_attention_steps(twin) == layers
    steps = [m.__dict__.get("forward") for m in attention_modules(model)]
    assert all(isinstance(s, attention_step.AttentionStep) and s.project for s in steps)
    gc.collect()
    assert len(stacked) == (0 if architecture == "gpt2" else layers) and all(ref() is None for ref in stacked)
    if architecture != "gpt2":  # q, k and v's own steps' graphs are left until a step needs them
        projection = attention_modules(model)[0].k_proj.__dict__["forward"]
        assert isinstance(projection, OptimizedForward) and not any(key[2] for key in projection.graphs)

    tokens = greedy(twin, PROMPT, 16)
    runs: list[int] = []
    run = attention_step.AttentionStep._run
    attention_step.AttentionStep._run = lambda self, *a: runs.append(1) or run(self, *a)  # type: ignore[method-assign]
    projections: list[int] = []
    if architecture != "gpt2":
        q_proj = attention_modules(model)[0].q_proj
        q_forward = q_proj.forward
        q_proj.forward = lambda x: projections.append(x.shape[-2]) or q_forward(x)  # type: ignore[method-assign]
    try:
        logits = step_logits(model, tokens)
    finally:
        attention_step.AttentionStep._run = run  # type: ignore[method-assign]
        if architecture != "gpt2":
            q_proj.forward = q_forward  # type: ignore[method-assign]
    assert len(runs) == (tokens.shape[1] - 12) * layers  # every step of every layer
    assert projections == ([] if architecture == "gpt2" else [12])  # the prompt's only
    torch.testing.assert_close(logits, step_logits(twin, tokens), rtol=1e-5, atol=1e-5)
    assert torch.equal(greedy(model, PROMPT, 16), tokens)
    fxopt.restore_model(model)
    assert not any(isinstance(m.__dict__.get("forward"), attention_step.AttentionStep) for m in attention_modules(model))


def test_attention_steps_leave_masked_batched_and_preserving_calls_to_the_module() -> None:
    """A step with a padding mask, a batch of two, or the preserving preset (SDPA, no steps
    installed) runs the module's own forward: the same outputs as without the steps; an attention
    module with more than the four projections (Qwen3's q and k norms) gets no step."""
    model, twin = tiny_llama(), tiny_llama()
    fxopt.optimize_model(model, "decode", calibration=PROMPT)
    fxopt.optimize_model(twin, "decode", calibration=PROMPT)
    without_attention_steps(twin)
    prompts = torch.cat([PROMPT, PROMPT.flip(-1)])
    mask = torch.ones_like(prompts)
    mask[1, :3] = 0  # left padding: every step of the batch carries a mask
    with torch.no_grad():
        kwargs = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert torch.equal(model.generate(prompts, attention_mask=mask, **kwargs), twin.generate(prompts, attention_mask=mask, **kwargs))
        one = model.generate(PROMPT, attention_mask=mask[1:], **kwargs)
        assert torch.equal(one, twin.generate(PROMPT, attention_mask=mask[1:], **kwargs))
    preserving = tiny_llama()
    fxopt.optimize_model(preserving, "default")
    assert without_attention_steps(preserving) == 0
    # Qwen3 normalises q and k in its attention: a forward this does not reproduce, left alone.
    torch.manual_seed(0)
    sizes = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**sizes, num_key_value_heads=2, head_dim=16)).eval()
    expected = greedy(qwen3, PROMPT, 6)
    fxopt.optimize_model(qwen3, "decode", calibration=PROMPT)
    assert without_attention_steps(qwen3) == 0
    assert greedy(qwen3, PROMPT, 6).shape == expected.shape
