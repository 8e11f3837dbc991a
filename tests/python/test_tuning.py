"""Kernel choices by measurement (fxopt.tuning): which candidate a pass emits follows the
timings, the cache, pins and what this CPU runs natively. Timings are injected: what these tests
check is the decision, never the speed of this machine."""

from __future__ import annotations

import time

import torch
import transformers
import pytest

import fxopt
from fxopt.runtime.onednn_linear import linear_pointwise
from fxopt import tuning
from fxopt.optimization import FuseLinearActivationOneDnn, QuantizeLinearsInt8, QuantizeLinearsWeightOnly, compose
from fxopt.tuning import chooser as chooser_module
from fxopt.tuning import kernels, measure
from fxopt.tuning.cache import ChoiceCache, machine_key

from conftest import build_model, fake_timings, linear_calls, tiny_bert_config, tiny_gpt2_config, token_inputs

ONEDNN = linear_pointwise


def traced_bert():
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 8)
    return model, fxopt.trace(model, example_inputs=inputs), inputs


def onednn_calls(gm) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is ONEDNN)


def gelu_calls(gm) -> int:
    return sum(1 for n in gm.graph.nodes if "gelu" in str(n.target))


def needs_onednn():
    if not fxopt.optimization.hardware.onednn_linear_available():
        pytest.skip("this torch has no oneDNN fused linear")


def test_a_candidate_that_loses_is_not_picked(measuring, monkeypatch):
    needs_onednn()
    fake_timings(monkeypatch, {"aten": 1.0, "onednn": 1.2, "onednn_fused": 1.5})
    model, gm, inputs = traced_bert()
    pass_ = FuseLinearActivationOneDnn()
    out = compose(pass_, inplace=False)(gm)
    assert onednn_calls(out) == 0
    assert {c.picked for c in pass_.report.choices} == {"aten"}
    assert {c.how for c in pass_.report.choices} <= {"measured", "cached"}
    assert all(reason.startswith("ATen's linear was measured faster") for _, reason in pass_.report.skipped)


def test_a_winner_within_the_margin_is_not_picked(measuring, monkeypatch):
    needs_onednn()
    inside = 1 - chooser_module.MARGIN / 2
    fake_timings(monkeypatch, {"aten": 1.0, "onednn": inside, "onednn_fused": inside})
    _, gm, _ = traced_bert()
    assert onednn_calls(compose(FuseLinearActivationOneDnn(), inplace=False)(gm)) == 0


def test_measured_choices_change_the_graph_and_reverse_exactly(measuring, monkeypatch):
    needs_onednn()
    # Unfused oneDNN wins: every Linear becomes the op, every GELU stays.
    fake_timings(monkeypatch, {"aten": 1.0, "onednn": 0.5, "onednn_fused": 0.8})
    model, gm, inputs = traced_bert()
    linears = len(linear_calls(gm))
    transformation = compose(FuseLinearActivationOneDnn(), inplace=False)
    out = transformation(gm)
    assert onednn_calls(out) == linears
    assert gelu_calls(out) == gelu_calls(gm) > 0
    torch.testing.assert_close(out(**inputs), gm(**inputs), rtol=1e-5, atol=1e-5)
    restored = transformation(out, reverse=True)
    for a, b in zip(torch.utils._pytree.tree_leaves(restored(**inputs)), torch.utils._pytree.tree_leaves(gm(**inputs))):
        assert torch.equal(a, b)


def test_a_second_optimize_tunes_nothing(measuring, monkeypatch):
    needs_onednn()
    timings = {"aten": 1.0, "onednn": 0.9, "onednn_fused": 0.7, "sdpa": 1.0, "fxopt_f32": 0.8}  # default's queries
    timed = fake_timings(monkeypatch, timings)
    model = build_model(transformers.BertModel, tiny_bert_config())
    inputs = token_inputs(2, 8)
    first = fxopt.optimize(model, "default", example_inputs=inputs)
    assert timed, "the first optimize measured nothing"
    distinct = len(timed)
    second = fxopt.optimize(model, "default", example_inputs=inputs)
    assert len(timed) == distinct
    assert onednn_calls(first) == onednn_calls(second) > 0


def test_the_cache_is_keyed_by_cpu_and_torch_version(tmp_path, monkeypatch):
    cache = ChoiceCache(tmp_path)
    cache.put("query", {"picked": "onednn", "ratio": 0.8})
    assert ChoiceCache(tmp_path).get("query") == {"picked": "onednn", "ratio": 0.8}
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert ChoiceCache(tmp_path).get("query") is None
    monkeypatch.undo()
    monkeypatch.setattr(fxopt.optimization.hardware, "cpu_model", lambda: "Another CPU")
    assert ChoiceCache(tmp_path).get("query") is None
    monkeypatch.undo()
    from fxopt.tuning import cache as cache_module

    monkeypatch.setattr(cache_module, "KERNELS", "k-next")  # a candidate's kernel changed
    assert ChoiceCache(tmp_path).get("query") is None


def test_a_tuning_run_writes_its_cache_once(measuring, monkeypatch):
    """The entries of one run of passes reach the file together, at its end (each write
    replaces the whole file); a later process reads them all."""
    needs_onednn()
    fake_timings(monkeypatch, {"aten": 1.0, "onednn": 0.9, "onednn_fused": 0.7, "sdpa": 1.0, "fxopt_f32": 0.8})
    from fxopt.tuning import cache as cache_module

    replaced = []
    real_replace = cache_module.os.replace
    monkeypatch.setattr(cache_module.os, "replace", lambda *paths: (replaced.append(paths), real_replace(*paths)))
    model = build_model(transformers.BertModel, tiny_bert_config())
    fxopt.optimize(model, "default", example_inputs=token_inputs(2, 8))
    entries = measuring.cache._load()
    assert len(entries) > 1 and len(replaced) == 1
    assert ChoiceCache(measuring.cache.directory)._load() == entries

    with pytest.raises(RuntimeError), measuring.cache.writes_deferred():
        measuring.cache.put("query", {"picked": "onednn", "ratio": 0.8})
        assert ChoiceCache(measuring.cache.directory).get("query") is None
        raise RuntimeError("a pass failed after measuring")
    assert ChoiceCache(measuring.cache.directory).get("query") == {"picked": "onednn", "ratio": 0.8}


class _HeadedStack(torch.nn.Module):
    """Eight 256-wide Linears over every token, then `heads` Linears of the first token alone
    (a pooler): one head does 0.3% of the work (multiply-adds, and three per byte of weight)."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(8)))
        self.heads = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(heads))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        first = self.layers(x)[:, 0]
        return [torch.tanh(head(first)) for head in self.heads]


@pytest.mark.parametrize("mode", ["dynamo", "sized"])
@pytest.mark.parametrize("heads", [1, 16])
def test_a_linear_doing_a_negligible_share_of_the_work_is_not_timed(measuring, monkeypatch, heads: int, mode: str):
    """One pooler-like head (0.3% of the work) keeps its op, untimed; sixteen alike heads are
    one query doing 5% together, so it is timed for all of them. The work is counted whether
    the graph calls its Linears as functions (Dynamo) or as modules (the sized tracer)."""
    needs_onednn()
    timed = fake_timings(monkeypatch, {"aten": 1.0, "onednn": 0.5, "onednn_fused": 0.4})
    model = _HeadedStack(heads).eval()
    x = torch.randn(1, 512, 256)
    gm = fxopt.trace(model, example_inputs=(x,), mode=mode)
    expected = gm(x)
    pass_ = FuseLinearActivationOneDnn()
    out = compose(pass_, inplace=False)(gm)
    # The heads read the first token's 2-D slice; the layers, every token.
    linears = [n for n in gm.graph.nodes if n.op == "call_module" or "linear" in str(n.target)]
    assert len(linears) == 8 + heads
    heads_read = {n.name for n in linears if n.args[0].meta["val"].dim() == 2}
    head_choices = [c for c in pass_.report.choices if c.node in heads_read]
    body = [c for c in pass_.report.choices if c.node not in heads_read]
    assert len(pass_.report.choices) == 8 + heads and len(head_choices) == heads
    assert {c.picked for c in body} == {"onednn"} and {c.how for c in body} <= {"measured", "cached"}
    if heads == 1:
        assert [(c.picked, c.how) for c in head_choices] == [("aten", "untimed: 0.31% of the graph's work")]
        assert len(timed) == 1 and onednn_calls(out) == 8
    else:
        assert {c.picked for c in head_choices} == {"onednn_fused"} and len(timed) == 2
        assert onednn_calls(out) == 8 + heads
    torch.testing.assert_close(out(x), expected, rtol=1e-5, atol=1e-5)


def test_a_cached_choice_follows_the_current_margin(measuring, monkeypatch):
    """The cache keeps each candidate's time, so an entry cached under another MARGIN is decided
    by today's: onednn 2% faster is picked at 1%, kept out at 3%; an entry without its times
    (written before they were kept) stays as cached."""
    needs_onednn()
    timed = fake_timings(monkeypatch, {"aten": 1.0, "onednn": 0.98, "onednn_fused": 0.98})
    _, gm, _ = traced_bert()
    assert onednn_calls(compose(FuseLinearActivationOneDnn(), inplace=False)(gm)) > 0
    measured = len(timed)
    monkeypatch.setattr(chooser_module, "MARGIN", 0.03)
    pass_ = FuseLinearActivationOneDnn()
    assert onednn_calls(compose(pass_, inplace=False)(gm)) == 0 and len(timed) == measured
    assert {c.how for c in pass_.report.choices} == {"cached"}
    monkeypatch.setattr(chooser_module, "MARGIN", 0.01)
    for entry in measuring.cache._load().values():
        del entry["seconds"]
        entry["picked"], entry["ratio"] = "aten", 1.0
    assert onednn_calls(compose(FuseLinearActivationOneDnn(), inplace=False)(gm)) == 0


def test_a_pinned_choice_is_honoured_without_measuring(measuring, monkeypatch):
    needs_onednn()
    timed = fake_timings(monkeypatch, {"aten": 0.1, "onednn": 1.0, "onednn_fused": 1.0})
    _, gm, _ = traced_bert()
    pass_ = FuseLinearActivationOneDnn()
    with tuning.pinned({"linear[gelu]": "onednn_fused"}, linear="onednn"):
        out = compose(pass_, inplace=False)(gm)
    assert not timed
    assert onednn_calls(out) > 0 and gelu_calls(out) == 0
    assert {c.how for c in pass_.report.choices} == {"pinned"}
    # Pins end with the block.
    assert onednn_calls(compose(FuseLinearActivationOneDnn(), inplace=False)(gm)) == 0


def test_an_unavailable_kernel_is_never_timed_or_picked(measuring, monkeypatch):
    int8 = [name for name in kernels.KERNELS["int8_linear"] if name.startswith("int8_")]
    assert {"int8_per_token", "int8_onednn", "int8_fbgemm"} <= set(int8)
    timed = fake_timings(monkeypatch, {"float32": 1.0, **{name: 0.01 for name in int8}})
    for name in int8:  # as on a CPU without VNNI and a torch without quantized engines
        never = kernels.Kernel(lambda: False, kernels.KERNELS["int8_linear"][name].build)
        monkeypatch.setitem(kernels.KERNELS["int8_linear"], name, never)
    _, gm, inputs = traced_bert()
    pass_ = QuantizeLinearsInt8()
    out = compose(pass_, inplace=False)(gm)
    assert not timed
    assert not pass_.report.changed
    assert {c.picked for c in pass_.report.choices} == {"float32"}
    # Even as the pass's static fallback or a pin.
    monkeypatch.setattr(measuring, "mode", "static")
    for name in int8:
        with tuning.pinned(int8_linear=name):
            pinned = QuantizeLinearsInt8()
            compose(pinned, inplace=False)(gm)
            assert not pinned.report.changed
    torch.testing.assert_close(out(**inputs), gm(**inputs))


def test_past_the_budget_the_static_fallback_applies(measuring, monkeypatch):
    needs_onednn()
    monkeypatch.setattr(measuring, "budget_s", 0.0)
    timed = fake_timings(monkeypatch, {"aten": 0.1, "onednn": 1.0, "onednn_fused": 1.0})
    _, gm, _ = traced_bert()
    pass_ = FuseLinearActivationOneDnn()
    compose(pass_, inplace=False)(gm)
    assert not timed
    assert {c.how for c in pass_.report.choices} == {"static: tuning budget spent"}
    assert {c.picked for c in pass_.report.choices} <= {"onednn", "onednn_fused"}


def test_real_timings_pick_a_candidate_that_runs(measuring, monkeypatch):
    """Without injected timings: every registered kernel builds and runs on a real problem (16
    tokens: streamed, on a small cache's worth of copies). What is checked is that each query is
    measured, not how long that takes on a loaded machine: no budget runs out here."""
    monkeypatch.setattr(measuring, "budget_s", float("inf"))
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: 1 << 20)
    choices = measuring.for_graph(None)
    for op, candidates, variant in (
        ("linear", ["aten", "onednn", "onednn_fused"], "gelu"),
        ("linear", ["aten", "onednn"], "none,no_bias"),
        ("int8_linear", ["float32", "int8_per_token", "int8_onednn", "int8_fbgemm"], "none"),
        ("int8_linear", ["float32", "int8_per_token", "int8_onednn", "int8_fbgemm"], "none,no_bias"),
        ("int8_weight_only", ["float32", "int8_weight_only", "fxopt_int8"], "none"),
        ("int4_weight_only", ["float32", "int4_weight_only", "fxopt_int4"], "none"),
    ):
        index, ratio, how = choices.choose(op, [16, 32, 64], "float32", variant, "x", candidates, 0)
        assert 0 <= index < len(candidates) and ratio > 0 and how == "measured"
    # A 1x1 convolution of 16 -> 24 channels on a 6x6 image, ReLU after it, and its int8 calls.
    conv = [1, 16, 6, 6, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1]
    candidates = ["float32", "int8_onednn", "float32_fxopt", "int8_fxopt"]
    available = [name for name in candidates if kernels.kernel("int8_conv2d", name).available()]
    index, ratio, how = choices.choose("int8_conv2d", conv, "float32", "relu", "x", available, 0)
    assert 0 <= index < len(available) and ratio > 0 and how == "measured"
    assert choices.spent_s > 0


def test_every_timed_call_follows_a_cache_eviction(monkeypatch):
    """Inside a model a Linear's weight is not in the core's cache when it runs (the other layers
    ran since), so the micro-benchmark never times a call right after another."""
    events: list[str] = []
    monkeypatch.setattr(measure, "_evict", lambda: events.append("evict"))
    times = measure.best_times({"a": lambda: events.append("a"), "b": lambda: events.append("b")}, rounds=2)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
    after = [events[i - 1] if i else None for i, event in enumerate(events) if event != "evict"]
    assert after.count("evict") == len(after) - 2  # all but one untimed warm-up per runner
    assert "evicted" in machine_key()  # choices timed back to back are not reused


def test_a_convolutions_activations_are_read_back_after_each_eviction(monkeypatch):
    """A convolution's input comes hot from the op before it in a forward (hundreds of kilobytes
    at MobileNetV2's early sizes), its weight does not: each timed call of a convolution
    candidate follows an eviction, then a read of its input and residual; a Linear's candidates
    carry no activations to read."""
    events: list[str] = []
    monkeypatch.setattr(measure, "_evict", lambda: events.append("evict"))
    read = measure._read
    monkeypatch.setattr(measure, "_read", lambda tensors: (events.append(f"read {len(tensors)}"), read(tensors)))
    problem = kernels.Problem("conv2d", (1, 8, 6, 6, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1), "float32", "relu,add")
    runner = kernels.kernel("conv2d", "aten").build(problem)
    assert len(runner.activations) == 2 and all(t is not None for t in runner.activations)
    calls = []
    timed = kernels.Runner(lambda w: (calls.append(len(events)), runner.run(w))[1], runner.weights, runner.activations)
    measure.best_times({"conv": timed}, rounds=2)
    # Every call but the first (an untimed warm-up) right after an eviction and the read.
    assert all(events[at - 2 : at] == ["evict", "read 2"] for at in calls[1:])
    linear = kernels.kernel("linear", "aten").build(kernels.Problem("linear", (16, 32, 64), "float32", "none"))
    assert linear.activations == ()


def test_streaming_cycles_through_copies_beyond_the_last_level_cache(monkeypatch):
    """A decoding step reads each weight from memory: a Linear of a few tokens is timed on copies
    of its weights, more than the last-level cache in all, each run in turn with the same result."""
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: 1 << 20)
    problem = kernels.Problem("int8_weight_only", (1, 256, 512), "float32", "none")
    runner = kernels.kernel("int8_weight_only", "fxopt_int8").build(problem)
    used: list[int] = []

    def counted(weights):
        used.append(weights[0].data_ptr())
        return runner.run(weights)

    run = measure.streaming(kernels.Runner(counted, runner.weights))
    copies = len(used)  # each copy ran once, for its first-call work
    stream_bytes = measure.STREAM_FACTOR * (1 << 20)
    assert copies == len(set(used)) and copies * runner.weight_bytes >= stream_bytes
    assert (copies - 1) * runner.weight_bytes < stream_bytes  # no more copies than that
    expected = runner()
    for _ in range(copies):
        assert torch.equal(run(), expected)
    assert used[copies:] == used[:copies]
    assert "streamed" in machine_key()  # choices timed otherwise are not reused


def test_a_wide_linear_of_many_tokens_is_timed_on_part_of_its_features(measuring, monkeypatch):
    """GPT-2's 768 x 50257 head at 128 tokens: timed on fewer output features (the same remainder
    modulo 64), recorded in the cache entry; narrow or few-token Linears on their own shape."""
    shapes: list[tuple[int, ...]] = []

    def best_times(runners, **_):
        runner = next(iter(runners.values()))
        shapes.append(tuple(runner.weights[0].shape) if isinstance(runner, kernels.Runner) else ())
        return {name: float(index + 1) for index, name in enumerate(runners)}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: 1 << 20)
    choices = measuring.for_graph(None)
    for shape in ([128, 768, 50257], [128, 768, 2304], [16, 768, 50257]):
        choices.choose("linear", shape, "float32", "none", "x", ["aten", "onednn"], 1)
    cut = kernels.timed_problem(kernels.Problem("linear", (128, 768, 50257), "float32", "none"))
    assert cut.shape[:2] == (128, 768) and cut.shape[2] % 64 == 50257 % 64
    assert kernels.MIN_TIMED_FEATURES <= cut.shape[2] < 50257
    assert 768 * (cut.shape[2] - 64) <= kernels.TIMED_WEIGHT_ELEMENTS
    assert shapes == [(cut.shape[2], 768), (2304, 768), ()]  # the last one streamed
    entries = measuring.cache._load()
    timed = [entry.get("timed_shape") for entry in entries.values()]
    assert sorted(map(str, timed)) == sorted(map(str, [list(cut.shape), None, None]))


def test_long_calls_are_timed_without_evictions(monkeypatch):
    """A call of a millisecond or more loses nothing measurable to a cold cache, and each
    eviction costs about 0.7 ms: only the timing that sized the rounds follows one."""
    evictions: list[int] = []
    monkeypatch.setattr(measure, "_evict", lambda: evictions.append(1))
    monkeypatch.setattr(measure, "_decided", lambda samples: True)  # MIN_ROUNDS rounds
    measure.best_times({"long": lambda: time.sleep(measure.UNEVICTED_S)}, rounds=7)
    assert len(evictions) == 1
    evictions.clear()
    measure.best_times({"long": lambda: time.sleep(measure.UNEVICTED_S), "short": lambda: None}, rounds=7)
    assert len(evictions) > 2  # a short candidate among them: the rounds' calls evicted too


def test_only_linears_of_a_few_tokens_are_timed_streaming(measuring, monkeypatch):
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: 1 << 20)
    timed: list[tuple[bool, bool]] = []

    def best_times(runners, evict=True, **_):
        timed.append((evict, all(isinstance(run, kernels.Runner) for run in runners.values())))
        return {name: float(run() is None) + 1.0 for name, run in runners.items()}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    choices = measuring.for_graph(None)
    candidates = ["float32", "int8_weight_only", "fxopt_int8"]
    for tokens in (1, kernels.STREAMED_TOKENS, kernels.STREAMED_TOKENS + 1):
        choices.choose("int8_weight_only", [tokens, 64, 128], "float32", "none", "x", candidates, 0)
    # Streamed: no eviction, runners cycling through copies; past STREAMED_TOKENS: evicted.
    assert timed == [(False, False), (False, False), (True, True)]


def test_few_tokens_stream_only_where_the_models_weights_exceed_the_cache(measuring, monkeypatch):
    """A graph whose weights fit the last-level cache reads them from there at every forward:
    its one-token Linears are timed after an eviction only. optimize_model's blocks are parts
    of a model: the whole model's weights decide (KernelChooser.reading)."""
    timed: list[bool] = []

    def best_times(runners, evict=True, **_):
        timed.append(evict)
        return {name: float(index + 1) for index, name in enumerate(runners)}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    _, gm, _ = traced_bert()
    own = tuning.weight_bytes(gm.state_dict().values())
    candidates = ["float32", "int8_weight_only", "fxopt_int8"]
    query = ("int8_weight_only", [1, 64, 128], "float32", "none", "x", candidates, 0)
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: 2 * own)
    measuring.for_graph(gm).choose(*query)
    with measuring.reading(4 * own):  # the same graph as a block of a model twice the cache
        measuring.for_graph(gm).choose(*query)
    assert timed == [True, False]  # evicted, then streamed: two timings, two cache entries
    keys = list(measuring.cache._load())
    assert len(keys) == 2 and sum(key.endswith('"streamed"]') for key in keys) == 1
    assert measuring.model_bytes is None  # reading() ends with its block


def test_optimize_models_blocks_are_timed_as_parts_of_the_model(measuring, monkeypatch):
    """A GPT-2 block's own weights fit a cache its model's do not: its one-token Linears are
    timed streaming, as the model's decoding steps read them."""
    evicted: list[bool] = []

    def best_times(runners, evict=True, **_):
        if "rewritten" not in runners:  # a kernel query, not a block against its own forward
            evicted.append(evict)
        return {name: float(index + 1) for index, name in enumerate(runners)}

    monkeypatch.setattr(chooser_module, "best_times", best_times)
    model = build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config())  # its own: optimized here
    total = tuning.weight_bytes(model.state_dict().values())
    mlp = tuning.weight_bytes(model.transformer.h[0].mlp.state_dict().values())
    monkeypatch.setattr(fxopt.optimization.hardware, "last_level_cache_bytes", lambda: (total + mlp) // 2)
    fxopt.optimize_model(model, "default", calibration=torch.randint(0, 100, (1, 1)))
    fxopt.restore_model(model)
    assert evicted and not any(evicted)  # every query of the one-token graphs streamed


def test_a_failing_chooser_fails_the_pass_and_leaves_the_graph(measuring, monkeypatch):
    needs_onednn()

    def broken(*_args, **_kwargs):
        raise RuntimeError("no timer")

    monkeypatch.setattr(chooser_module, "best_times", broken)
    _, gm, inputs = traced_bert()
    code = gm.code
    with pytest.raises(fxopt.optimization.TransformationError, match="kernel chooser failed.*no timer"):
        compose(FuseLinearActivationOneDnn(), inplace=True)(gm)
    assert gm.code == code


def test_weight_only_int8_follows_the_measurement(measuring, monkeypatch):
    fake_timings(monkeypatch, {"float32": 1.0, "int8_weight_only": 2.0, "fxopt_int8": 2.0})
    _, gm, inputs = traced_bert()
    pass_ = QuantizeLinearsWeightOnly()
    out = compose(pass_, inplace=False)(gm)
    assert not pass_.report.changed
    assert {c.picked for c in pass_.report.choices} == {"float32"}
    assert {c.op for c in pass_.report.choices} == {"int8_weight_only"}
    assert out.code == gm.code
    for fastest, product in (("int8_weight_only", "_weight_int8pack_mm"), ("fxopt_int8", "int8_weight_linear")):
        fake_timings(monkeypatch, {"float32": 1.0, "int8_weight_only": 0.5, "fxopt_int8": 0.5} | {fastest: 0.25})
        measuring.cache = ChoiceCache(measuring.cache.directory / fastest)
        pass_ = QuantizeLinearsWeightOnly()
        out = compose(pass_, inplace=False)(gm)
        assert pass_.report.changed and {c.picked for c in pass_.report.choices} == {fastest}
        assert product in out.code
        torch.testing.assert_close(out(**inputs), gm(**inputs), rtol=0.05, atol=0.05)
        assert pass_(out, reverse=True).code == gm.code


def test_weight_only_int4_follows_the_measurement(measuring, monkeypatch):
    _, gm, inputs = traced_bert()
    for fastest, product in (("int4_weight_only", "_weight_int4pack_mm_for_cpu"), ("fxopt_int4", "int4_weight_linear")):
        fake_timings(monkeypatch, {"float32": 1.0, "int4_weight_only": 0.5, "fxopt_int4": 0.5} | {fastest: 0.25})
        measuring.cache = ChoiceCache(measuring.cache.directory / fastest)
        pass_ = QuantizeLinearsWeightOnly(bits=4)
        out = compose(pass_, inplace=False)(gm)
        assert pass_.report.changed and {c.picked for c in pass_.report.choices} == {fastest}
        assert {c.op for c in pass_.report.choices} == {"int4_weight_only"}
        assert product in out.code
        torch.testing.assert_close(out(**inputs), gm(**inputs), rtol=0.2, atol=0.2)
        assert pass_(out, reverse=True).code == gm.code


def test_a_rewrite_is_preferred_by_measurement_once_per_key(measuring, monkeypatch):
    """optimize_model's verdict per block (graph or the block's own forward) follows the chooser's
    rules: timed once, cached, and the rewrite only where it is MARGIN faster."""
    timed = fake_timings(monkeypatch, {"rewritten": 0.5, "unchanged": 1.0})
    assert measuring.prefers_rewrite("block", lambda: None, lambda: None)
    assert measuring.prefers_rewrite("block", lambda: None, lambda: None) and len(timed) == 1
    fake_timings(monkeypatch, {"rewritten": 1 - chooser_module.MARGIN / 2, "unchanged": 1.0})
    assert not measuring.prefers_rewrite("another block", lambda: None, lambda: None)
    monkeypatch.setattr(measuring, "mode", "static")
    assert measuring.prefers_rewrite("another block", lambda: None, lambda: None)


def test_a_gpu_result_is_waited_for_inside_the_timed_call(monkeypatch):
    """A CUDA call returns once its kernels are queued: timing it must wait for them."""
    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))

    class OnGpu(torch.Tensor):
        @property
        def is_cuda(self) -> bool:  # type: ignore[override]
            return True

    on_gpu = torch.zeros(2).as_subclass(OnGpu)
    measure._wait_for(torch.zeros(2))  # a CPU result is ready when the call returns
    assert waited == []
    measure._wait_for(on_gpu)
    measure._wait_for({"logits": [on_gpu, torch.zeros(1)]})
    assert len(waited) == 2
    times = measure.best_times({"gpu": lambda: on_gpu}, rounds=2)
    assert times["gpu"] > 0 and len(waited) > 2


def test_calls_too_long_for_the_rounds_are_timed_in_fewer_rounds(monkeypatch):
    """A call of tens of milliseconds (GPT-2's head) gets MIN_ROUNDS rounds, not seven, the
    timing that sized its rounds being the first."""
    monkeypatch.setattr(measure, "_evict", lambda: None)
    monkeypatch.setattr(measure, "_decided", lambda samples: False)  # see the next test
    calls = {"short": 0, "long": 0}

    def runner(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    measure.best_times({"short": runner("short")}, rounds=7)
    monkeypatch.setattr(measure, "TIMED_S", 0.0)  # now seven rounds of anything take too long
    measure.best_times({"long": runner("long")}, rounds=7)
    per_round = measure.MAX_CALLS  # a call this short fills every round
    assert calls["short"] == 2 + 7 * per_round  # warm-up, the first timing, seven rounds
    assert calls["long"] == 2 + measure.MIN_ROUNDS * per_round

    # A call that fills a round alone (round_s 0): its first timing is its first round.
    calls["long"] = 0
    measure.best_times({"long": runner("long")}, rounds=7, round_s=0.0)
    assert calls["long"] == 1 + measure.MIN_ROUNDS  # warm-up, then one call per round


def test_a_verdict_is_clear_once_the_others_are_apart_or_near_the_leader() -> None:
    """Rounds overlapping the leader's leave the verdict open unless the other candidate's
    fastest is within NEAR of the leader's: picking either then costs less than that."""
    near = 1 + measure.NEAR / 2
    assert measure._decided({"a": [1.0, 1.2], "b": [1.3, 1.4]})  # apart
    assert not measure._decided({"a": [1.0, 1.2], "b": [1.1, 1.4]})  # overlapping
    assert measure._decided({"a": [1.0, 1.2], "b": [near, 1.4], "c": [2.0, 2.1]})
    assert not measure._decided({"a": [1.0, 1.2], "b": [near, 1.4], "c": [1.1, 2.1]})


def test_rounds_stop_once_the_fastest_candidate_is_clear(monkeypatch):
    """After MIN_ROUNDS, a candidate whose slowest round beat every other's fastest wins: more
    rounds could not change the verdict (most of a CNN's choices)."""
    monkeypatch.setattr(measure, "_evict", lambda: None)
    calls = {"fast": 0, "slow": 0}

    def fast() -> None:
        calls["fast"] += 1

    def slow() -> None:
        calls["slow"] += 1
        time.sleep(0.005)

    times = measure.best_times({"fast": fast, "slow": slow}, rounds=7)
    assert times["fast"] < times["slow"]
    assert calls["slow"] == 1 + measure.MIN_ROUNDS  # warm-up, then one call a round (the first sized it)
    assert calls["fast"] == 2 + measure.MIN_ROUNDS * measure.MAX_CALLS


def test_the_candidates_of_one_query_share_its_operands_until_it_is_timed(measuring, monkeypatch):
    """Each candidate of a query is built on the same drawn operands (one weight, packed once by
    oneDNN for both of its candidates); once the query is timed they are let go, so a graph's
    tuning keeps no operand alive."""
    needs_onednn()
    problem = kernels.Problem("linear", (16, 64, 96), "float32", "gelu")
    aten, onednn = (kernels.kernel("linear", name).build(problem) for name in ("aten", "onednn_fused"))
    assert aten.weights[0] is onednn.weights[0]
    torch.testing.assert_close(onednn(), aten(), rtol=1e-4, atol=1e-5)  # the same product of the same operands
    kernels.operands_released()
    assert kernels.kernel("linear", "aten").build(problem).weights[0] is not aten.weights[0]

    timed = fake_timings(monkeypatch, {"aten": 1.0, "onednn": 0.5, "onednn_fused": 0.4})
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU()).eval()
    x = torch.randn(4, 16, 64)
    gm = fxopt.trace(model, example_inputs=(x,), mode="dynamo")
    out = compose(FuseLinearActivationOneDnn(), inplace=False)(gm)
    assert timed and onednn_calls(out) == 1
    assert kernels._linear_operands.cache_info().currsize == 0
