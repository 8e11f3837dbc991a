"""ChooseAttentionKernel and its runtime functions: a bfloat16 scaled_dot_product_attention runs
fxopt's AVX512-BF16 kernel where the chooser picks it, close to ATen's bfloat16 attention, and a
float32 one fxopt's AVX2 kernel, within float32 rounding of ATen's; everything a kernel does not
take runs SDPA itself; reverse restores the call exactly."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers

import fxopt
from fxopt import _core
from fxopt.optimization import ChangePrecision, ChooseAttentionKernel, compose
from fxopt import tuning
from fxopt.runtime.prefill_attention import attention_bf16, attention_f32

KERNEL = _core.prefill_attention_bf16_available()
"""Whether this CPU runs the kernel (AVX512-BF16); elsewhere the chooser never picks it."""

FLOAT_KERNEL = _core.prefill_attention_f32_available()
"""Whether this CPU runs the float32 kernel (AVX2 with FMA)."""

SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def tiny_bert() -> transformers.BertModel:
    config = transformers.BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def bert_inputs() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 128, (2, 24), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, -7:] = 0  # padding: the mask reaches the attention
    return {"input_ids": ids, "attention_mask": mask}


def targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.target in (*SDPA, attention_bf16, attention_f32)]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def test_a_lowered_bert_runs_the_kernel_close_to_sdpa_and_reverses_exactly() -> None:
    model, inputs = tiny_bert(), bert_inputs()
    with torch.no_grad():
        reference = model(**inputs).last_hidden_state
    lowered = compose(ChangePrecision(torch.bfloat16), inplace=True)(fxopt.trace(model, example_inputs=inputs))
    code, state = lowered.code, {k: v.clone() for k, v in lowered.state_dict().items()}
    with torch.no_grad():
        with_sdpa = lowered(**inputs)["last_hidden_state"]
    choose = ChooseAttentionKernel()
    chosen = choose(copy.deepcopy(lowered))
    assert choose.report is not None
    if KERNEL:  # head size 16: the kernel's smallest
        assert targets(chosen) == [attention_bf16] * 2 and len(choose.report.changed) == 2
        assert [c.picked for c in choose.report.choices] == ["fxopt_bf16"] * 2
    else:
        assert targets(chosen) == [torch._C._nn.scaled_dot_product_attention] * 2
        assert not choose.report.changed
    assert len(chosen.graph.nodes) == len(lowered.graph.nodes)  # the call changes target only
    with torch.no_grad():
        out = chosen(**inputs)["last_hidden_state"]
    assert out.dtype == with_sdpa.dtype == torch.float32
    # bfloat16 either way: both this close to float32, and to each other
    assert cosine(out, reference) > 0.9999 and cosine(with_sdpa, reference) > 0.9999
    torch.testing.assert_close(out, with_sdpa, rtol=0.05, atol=0.05)
    back = choose(chosen, reverse=True)
    assert back.code == code and targets(back) == [torch._C._nn.scaled_dot_product_attention] * 2
    with torch.no_grad():
        assert torch.equal(back(**inputs)["last_hidden_state"], with_sdpa)
    assert all(torch.equal(v, state[k]) for k, v in back.state_dict().items())


def test_a_float32_graph_keeps_sdpa_without_a_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 graphs are `default`'s: the static choice changes nothing it did not measure."""
    monkeypatch.setattr(tuning.current(), "mode", "static")
    model, inputs = tiny_bert(), bert_inputs()
    choose = ChooseAttentionKernel()
    gm = choose(fxopt.trace(model, example_inputs=inputs))
    assert choose.report is not None and not choose.report.changed
    assert [c.picked for c in choose.report.choices] == ["sdpa"] * 2
    assert all(reason.startswith("the kernel choice kept ATen's") for _, reason in choose.report.skipped)
    assert targets(gm) == [torch._C._nn.scaled_dot_product_attention] * 2


@pytest.mark.skipif(not FLOAT_KERNEL, reason="the float32 kernel needs AVX2 with FMA")
def test_a_float32_bert_runs_the_float_kernel_where_chosen_and_reverses_exactly() -> None:
    model, inputs = tiny_bert(), bert_inputs()
    traced = fxopt.trace(model, example_inputs=inputs)
    code, state = traced.code, {k: v.clone() for k, v in traced.state_dict().items()}
    with torch.no_grad():
        with_sdpa = traced(**inputs)["last_hidden_state"]
    choose = ChooseAttentionKernel()
    with tuning.pinned(attention="fxopt_f32"):
        chosen = choose(copy.deepcopy(traced))
    assert targets(chosen) == [attention_f32] * 2 and len(choose.report.changed) == 2  # type: ignore[union-attr]
    assert len(chosen.graph.nodes) == len(traced.graph.nodes)
    with torch.no_grad():
        out = chosen(**inputs)["last_hidden_state"]
    torch.testing.assert_close(out, with_sdpa, rtol=1e-5, atol=1e-5)  # float32 either way
    back = choose(chosen, reverse=True)
    assert back.code == code
    with torch.no_grad():
        assert torch.equal(back(**inputs)["last_hidden_state"], with_sdpa)
    assert all(torch.equal(v, state[k]) for k, v in back.state_dict().items())


def qkv(batch: int, heads: int, kv_heads: int, rows: int, keys: int, d: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """q, k and v as a model's projections give them: [batch, rows, heads * d] viewed per head."""
    g = torch.Generator().manual_seed(rows * 31 + d)
    q = (torch.randn(batch, rows, heads, d, generator=g) * 2).to(dtype).transpose(1, 2)
    k, v = ((torch.randn(batch, keys, kv_heads, d, generator=g)).to(dtype).transpose(1, 2) for _ in range(2))
    return [q, k, v]


@pytest.mark.skipif(not KERNEL, reason="the kernel needs AVX512-BF16; the fallback is tested below")
@pytest.mark.parametrize(
    ("shape", "mask", "causal"),
    [
        ((1, 12, 12, 128, 128, 32), "bool", False),
        ((2, 4, 4, 33, 33, 64), "float", False),
        ((1, 8, 2, 40, 40, 128), None, True),  # grouped-query heads
        ((1, 2, 2, 17, 50, 16), "float", False),  # a prompt against more keys
    ],
)
def test_the_kernel_matches_bfloat16_sdpa(shape: tuple[int, ...], mask: str | None, causal: bool) -> None:
    batch, heads, kv_heads, rows, keys, d = shape
    q, k, v = qkv(*shape, torch.bfloat16)
    attn_mask = None
    if mask is not None:
        keep = torch.ones(batch, 1, rows, keys, dtype=torch.bool)
        keep[..., -3:] = False
        attn_mask = keep if mask == "bool" else torch.zeros(keep.shape, dtype=torch.bfloat16).masked_fill(~keep, -1e4)
    gqa = heads != kv_heads
    expected = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), attn_mask=attn_mask if mask != "float" else attn_mask.double(), is_causal=causal, enable_gqa=gqa)  # type: ignore[union-attr]
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal, enable_gqa=gqa)
    out = attention_bf16(q, k, v, attn_mask=attn_mask, is_causal=causal, enable_gqa=gqa)
    assert out.shape == sdpa.shape and out.dtype == torch.bfloat16
    assert out.transpose(1, 2).is_contiguous()  # [batch, rows, heads, d] memory, as ATen's
    assert cosine(out, expected) >= cosine(sdpa, expected) - 1e-5
    torch.testing.assert_close(out.double(), expected, rtol=0.02, atol=0.02)


@pytest.mark.skipif(not FLOAT_KERNEL, reason="the float32 kernel needs AVX2 with FMA")
@pytest.mark.parametrize(
    ("shape", "mask", "causal"),
    [
        ((1, 12, 12, 128, 128, 32), "bool", False),
        ((2, 4, 4, 33, 33, 64), "float", False),
        ((1, 8, 2, 40, 40, 128), None, True),  # grouped-query heads
        ((1, 2, 2, 17, 50, 24), "float", False),  # a prompt against more keys, d of three vectors
        ((1, 3, 3, 9, 9, 256), "bool", True),
        ((1, 1, 1, 1, 1, 8), None, False),
    ],
)
def test_the_float_kernel_matches_sdpa(shape: tuple[int, ...], mask: str | None, causal: bool) -> None:
    batch, heads, kv_heads, rows, keys, d = shape
    q, k, v = qkv(*shape, torch.float32)
    attn_mask = None
    if mask is not None:
        keep = torch.ones(batch, 1, rows, keys, dtype=torch.bool)
        if keys > 4:
            keep[..., -3:] = False
        attn_mask = keep if mask == "bool" else torch.zeros(keep.shape).masked_fill(~keep, -1e4)
    gqa = heads != kv_heads
    both = {"attn_mask": attn_mask, "is_causal": causal, "enable_gqa": gqa}
    expected = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), **{**both, "attn_mask": attn_mask if mask != "float" else attn_mask.double()})  # type: ignore[union-attr]
    out = attention_f32(q, k, v, **both)
    assert out.shape == expected.shape and out.dtype == torch.float32
    assert out.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_calls_the_float_kernel_does_not_take_run_sdpa_itself() -> None:
    qb, kb, vb = qkv(1, 2, 2, 8, 8, 16, torch.bfloat16)
    assert torch.equal(attention_f32(qb, kb, vb), F.scaled_dot_product_attention(qb, kb, vb))  # bfloat16
    q, k, v = qkv(1, 2, 2, 8, 8, 12, torch.float32)  # head size 12: no multiple of 8
    assert torch.equal(attention_f32(q, k, v, scale=0.3), F.scaled_dot_product_attention(q, k, v, scale=0.3))
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 8, 8, 16, torch.float32))
    attention_f32(q, k, v).sum().backward()  # autograd: SDPA, which has a backward
    assert q.grad is not None
    # Causal with fewer queries than keys: SDPA aligns its mask top left, the kernel bottom right.
    q, k, v = qkv(1, 2, 2, 17, 50, 16, torch.float32)
    assert torch.equal(attention_f32(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_calls_the_kernel_does_not_take_run_sdpa_itself() -> None:
    q, k, v = qkv(1, 2, 2, 8, 8, 16, torch.float32)
    assert torch.equal(attention_bf16(q, k, v), F.scaled_dot_product_attention(q, k, v))  # float32
    qb, kb, vb = qkv(1, 2, 2, 8, 8, 24, torch.bfloat16)  # head size 24: no path
    assert torch.equal(attention_bf16(qb, kb, vb, scale=0.3), F.scaled_dot_product_attention(qb, kb, vb, scale=0.3))
    torch.manual_seed(0)
    dropped = attention_bf16(qb, kb, vb, dropout_p=0.5)
    torch.manual_seed(0)
    assert torch.equal(dropped, F.scaled_dot_product_attention(qb, kb, vb, dropout_p=0.5))
    mask = torch.rand(8, 8, generator=torch.Generator().manual_seed(0)) > 0.3
    both = qkv(1, 2, 2, 8, 8, 16, torch.bfloat16)  # a mask and is_causal: whatever SDPA makes of it
    assert torch.equal(
        attention_bf16(*both, attn_mask=mask, is_causal=True), F.scaled_dot_product_attention(*both, attn_mask=mask, is_causal=True)
    )
    q16, k16, v16 = (t.requires_grad_() for t in qkv(1, 2, 2, 8, 8, 16, torch.bfloat16))
    out = attention_bf16(q16, k16, v16)  # autograd: SDPA, which has a backward
    out.float().sum().backward()
    assert q16.grad is not None


@pytest.mark.skipif(not KERNEL, reason="the mask reaches the kernel only where it runs")
def test_one_mask_is_converted_once_while_it_lives_unchanged() -> None:
    """A model's layers all pass the same mask: converted once, again after an in-place change,
    and not held once the mask is gone."""
    import gc

    from fxopt.runtime import prefill_attention

    q, k, v = qkv(1, 2, 2, 16, 16, 32, torch.bfloat16)
    mask = torch.ones(1, 1, 16, 16, dtype=torch.bool)
    mask[..., -4:] = False
    mask[:, :, 0, -1] = True  # one row sees the last key: none is left out
    first = attention_bf16(q, k, v, attn_mask=mask)
    converted = prefill_attention._last_mask.get(mask)
    assert converted is not None and converted.additive is not None and converted.keys == 16
    assert torch.equal(attention_bf16(q, k, v, attn_mask=mask), first)
    assert prefill_attention._last_mask.get(mask) is converted  # reused, not made again
    mask[..., -8:] = False  # in place: the conversion is stale
    assert prefill_attention._last_mask.get(mask) is None
    expected = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), attn_mask=mask)
    torch.testing.assert_close(attention_bf16(q, k, v, attn_mask=mask).double(), expected, rtol=0.02, atol=0.02)
    del mask
    gc.collect()
    assert prefill_attention._last_mask.converted is None


def _mask_cases() -> list[tuple[str, torch.Tensor, int, bool]]:
    """(what, a bool mask over [1, 1, 24, 64], the keys a kernel reads, whether it is kept)."""
    none = torch.ones(1, 1, 24, 64, dtype=torch.bool)
    padded = none.clone()
    padded[..., 40:] = False  # keys past a padded sentence's 40 tokens
    holes = padded.clone()
    holes[..., 10:13] = False  # and masked keys inside: the mask stays
    row = padded.clone()
    row[:, :, 5, 50] = True  # one query sees key 50: the keys up to it stay
    return [
        ("masks nothing", none, 64, False),
        ("pads", padded, 40, False),
        ("pads with holes", holes, 40, True),
        ("one row sees further", row, 51, True),
        ("broadcast over keys", torch.ones(1, 1, 24, 1, dtype=torch.bool), 64, False),
        ("masks every key", torch.zeros(1, 1, 24, 64, dtype=torch.bool), 64, True),
    ]


@pytest.mark.skipif(not FLOAT_KERNEL, reason="the mask reaches the kernels only where they run")
@pytest.mark.parametrize("as_float", [False, True])
@pytest.mark.parametrize("case", range(len(_mask_cases())))
def test_keys_every_query_masks_are_left_out_and_a_mask_that_masks_nothing_is_dropped(
    case: int, as_float: bool
) -> None:
    """A batch padded to a fixed length masks its last keys for every query: the kernels stop
    before them (their weight is exactly 0); a mask with nothing left to mask runs as none (the
    float32 kernel's unmasked rows take one read-only pass for their largest score). Results as
    SDPA's, bit for bit those of the same call on the keys kept where the mask went."""
    from fxopt.runtime import prefill_attention

    what, keep, keys, kept = _mask_cases()[case]
    kernels = [(attention_f32, torch.float32, 1e-5)] + ([(attention_bf16, torch.bfloat16, 0.02)] if KERNEL else [])
    for kernel, dtype, tolerance in kernels:
        q, k, v = qkv(1, 4, 4, 24, 64, 32, dtype)
        attn_mask = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, float("-inf")) if as_float else keep
        out = kernel(q, k, v, attn_mask=attn_mask)
        converted = prefill_attention._last_mask.get(attn_mask)
        assert converted is not None and (converted.keys or 64) == keys, what
        assert (converted.additive is not None) == kept, what
        expected = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), attn_mask=keep)
        torch.testing.assert_close(out.double(), expected, rtol=tolerance, atol=tolerance)
        if not kept:
            assert torch.equal(out, kernel(q, k[..., :keys, :], v[..., :keys, :])), what


@pytest.mark.skipif(not KERNEL, reason="the mask reaches the kernel only where it runs")
def test_a_mask_made_under_inference_mode_is_reused_while_its_values_are_unchanged() -> None:
    """sentence-transformers' encode() runs under torch.inference_mode, whose tensors have no
    version counter to tell an in-place change (keeping their conversion unchecked was a crash):
    the conversion is reused while the mask's values equal a copy kept of them, and made again
    after an in-place change."""
    from fxopt.runtime import prefill_attention

    q, k, v = qkv(1, 2, 2, 16, 16, 32, torch.bfloat16)
    first_mask = torch.ones(1, 1, 16, 16, dtype=torch.bool)
    first_mask[..., -4:] = False
    first_mask[:, :, 0, -1] = True  # one row sees the last key: the mask is kept whole
    with torch.inference_mode():
        mask = first_mask.clone()
        first = attention_bf16(q, k, v, attn_mask=mask)
        converted = prefill_attention._last_mask.get(mask)
        assert converted is not None and converted.additive is not None
        assert torch.equal(attention_bf16(q, k, v, attn_mask=mask), first)
        assert prefill_attention._last_mask.get(mask) is converted  # reused, not made again
        mask[:, :, 0, -1] = False  # in place: the conversion is stale
        assert prefill_attention._last_mask.get(mask) is None
        second = attention_bf16(q, k, v, attn_mask=mask)
        assert prefill_attention._last_mask.get(mask).keys == 12  # made again: keys past 12 left out
    expected = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), attn_mask=first_mask)
    torch.testing.assert_close(first.double(), expected, rtol=0.02, atol=0.02)
    expected = F.scaled_dot_product_attention(q.double(), k[..., :12, :].double(), v[..., :12, :].double())
    torch.testing.assert_close(second.double(), expected, rtol=0.02, atol=0.02)


@pytest.mark.skipif(not KERNEL, reason="on a CPU without AVX512-BF16 the kernel is never timed")
@pytest.mark.parametrize("faster", ["sdpa", "fxopt_bf16"])
def test_the_measured_candidate_is_picked_at_the_traced_sizes(
    faster: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chooser times both candidates on the query's shape, sizes Dynamo left symbolic read
    from the query's size hints (batch 2, 24 rows, keys as many), and the graph follows the pick."""
    from fxopt import tuning
    from fxopt.tuning import chooser as chooser_module
    from fxopt.tuning.cache import ChoiceCache

    chooser = tuning.current()
    monkeypatch.setattr(chooser, "mode", "measure")
    monkeypatch.setattr(chooser, "cache", ChoiceCache(tmp_path))
    timed: list[tuple[str, ...]] = []

    def best_times(runners: dict[str, Any], **_: Any) -> dict[str, float]:
        timed.append(tuple(runners))
        for run in runners.values():
            run()  # each candidate runs on the problem's operands
        return {name: 1.0 if name == faster else 2.0 for name in runners}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    real = chooser_module.GraphChoices._measure
    problems: list[Any] = []
    monkeypatch.setattr(
        chooser_module.GraphChoices, "_measure", lambda self, problem, *a: problems.append(problem) or real(self, problem, *a)
    )
    model, inputs = tiny_bert(), bert_inputs()
    lowered = compose(ChangePrecision(torch.bfloat16), inplace=True)(fxopt.trace(model, example_inputs=inputs))
    choose = ChooseAttentionKernel()
    chosen = choose(lowered)
    assert timed == [("sdpa", "fxopt_bf16")]  # one shape, measured once, then cached
    assert problems[0].shape == (2, 4, 4, 24, 24, 16) and problems[0].variant == "mask"
    assert choose.report is not None
    assert [c.picked for c in choose.report.choices] == [faster] * 2
    assert [c.how for c in choose.report.choices] == ["measured", "cached"]
    expected = attention_bf16 if faster == "fxopt_bf16" else torch._C._nn.scaled_dot_product_attention
    assert targets(chosen) == [expected] * 2
    kept = [reason for _, reason in choose.report.skipped]
    assert kept == ([] if faster == "fxopt_bf16" else [kept[0]] * 2)
    assert all(reason.startswith("the kernel choice kept ATen's scaled_dot_product_attention") for reason in kept)
