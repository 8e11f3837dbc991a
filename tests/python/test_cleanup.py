"""Graph cleanup passes on real models: RemoveNoOps, EliminateCommonSubexpressions,
EliminateDeadCode and RemoveRuntimeAsserts on exported transformers-5 BERT and GPT-2 graphs and on a
symbolic trace of a user module. Outputs must equal eager's exactly (these passes never change
arithmetic), node counts drop by what the models contain, and reverse restores code and outputs.
"""

from __future__ import annotations

import collections
import copy
from typing import Any, Callable

import pytest
import torch
import torch.fx
import torch.nn.functional as F
import transformers
from torch.fx.passes.dialect.common.cse_pass import CSEPass
from torch.fx.passes.shape_prop import ShapeProp

import fxopt
from conftest import build_model, tiny_bert_config, tiny_gpt2_config, token_inputs
from fxopt.optimization import (
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    RemoveNoOps,
    RemoveRuntimeAsserts,
    compose,
)

CHECKS = (
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten._assert_async.msg,
)

MODELS: dict[str, Callable[[], Any]] = {
    "bert": lambda: build_model(transformers.BertModel, tiny_bert_config()),
    "gpt2": lambda: build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config()),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request: pytest.FixtureRequest) -> tuple[str, Any, torch.fx.GraphModule]:
    model = MODELS[request.param]()
    inputs = token_inputs(2, 8)
    return request.param, model, fxopt.trace(model, input_names=list(inputs), mode="export")


def _first_output(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, (tuple, list)) else next(iter(result.values()))


def _count(gm: torch.fx.GraphModule, target: Any, op: str = "call_function") -> int:
    return sum(1 for n in gm.graph.nodes if n.op == op and n.target == target)


def _names(gm: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes]


def _run_and_reverse(
    model: Any, gm: torch.fx.GraphModule, transformation: Any, check: Callable[[Any], None]
) -> None:
    """Applies `transformation` to a copy of `gm`, checks outputs against eager and `check`, then
    reverses and checks that code, node names and outputs are back exactly."""
    inputs = token_inputs(2, 8)
    with torch.no_grad():
        eager = _first_output(model(**inputs))
    candidate = copy.deepcopy(gm)
    code, names = candidate.code, _names(candidate)
    transformation(candidate)
    candidate.graph.lint()
    with torch.no_grad():
        assert torch.equal(_first_output(candidate(**inputs)), eager)
    check(candidate)
    transformation(candidate, reverse=True)
    assert candidate.code == code
    assert _names(candidate) == names
    assert not any(transformation.transformed(n) for n in candidate.graph.nodes)
    with torch.no_grad():
        assert torch.equal(_first_output(candidate(**inputs)), eager)


def test_remove_no_ops_on_exported_transformers(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    dropout = torch.ops.aten.dropout.default
    # Both models have 5 dropouts, all in eval mode: after the embeddings and, per layer, after
    # the attention output and the MLP (attention's own dropout is inside SDPA).
    assert _count(gm, dropout) == 5
    # The mask code casts a bool comparison to bool: a same-dtype cast on the same device.
    bool_to_bool = [
        n
        for n in gm.graph.nodes
        if n.target == torch.ops.aten.to.dtype_layout
        and n.args[0].meta["val"].dtype == torch.bool
        and n.kwargs["dtype"] == torch.bool
    ]
    assert bool_to_bool
    t = RemoveNoOps()

    def check(candidate: torch.fx.GraphModule) -> None:
        assert _count(candidate, dropout) == 0
        assert not set(t.report.changed) - {n.name for n in gm.graph.nodes}
        assert {n.name for n in bool_to_bool} <= set(t.report.changed)
        # The int64 -> bool cast of the attention mask is a real cast.
        assert any(reason == "casts int64 to bool" for _, reason in t.report.skipped)
        assert len(candidate.graph.nodes) == len(gm.graph.nodes) - len(t.report.changed)

    _run_and_reverse(model, gm, t, check)


def test_common_subexpressions_match_torch_fx_cse(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    reference = CSEPass()(copy.deepcopy(gm)).graph_module
    expected_removed = {n.name for n in gm.graph.nodes} - {n.name for n in reference.graph.nodes}
    # The repeated mask arithmetic (arange + 0, unsqueezes) is there to merge.
    assert expected_removed
    t = EliminateCommonSubexpressions()

    def check(candidate: torch.fx.GraphModule) -> None:
        assert set(t.report.changed) == expected_removed
        assert len(candidate.graph.nodes) == len(reference.graph.nodes)

    _run_and_reverse(model, gm, t, check)


def test_dead_code_matches_torch_fx_and_keeps_checks(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    reference = copy.deepcopy(gm)
    reference.graph.eliminate_dead_code()
    expected_removed = {n.name for n in gm.graph.nodes} - {n.name for n in reference.graph.nodes}
    assert expected_removed  # export leaves an unused branch of the mask code
    checks = sum(_count(gm, c) for c in CHECKS)
    t = EliminateDeadCode()

    def check(candidate: torch.fx.GraphModule) -> None:
        assert set(t.report.changed) == expected_removed
        assert sum(_count(candidate, c) for c in CHECKS) == checks
        assert _count(candidate, "_guards_fn", "call_module") == 1
        kept = collections.Counter(reason for _, reason in t.report.skipped)
        assert kept == {"unused, but kept: it is a runtime check": checks + 1}

    _run_and_reverse(model, gm, t, check)


def test_runtime_asserts_go_only_on_request(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    checks = sum(_count(gm, c) for c in CHECKS)
    assert checks > 0 and _count(gm, "_guards_fn", "call_module") == 1
    t = RemoveRuntimeAsserts()

    def check(candidate: torch.fx.GraphModule) -> None:
        assert sum(_count(candidate, c) for c in CHECKS) == 0
        assert _count(candidate, "_guards_fn", "call_module") == 0
        # The checks read values others use too (casts, the input): only the checks go.
        assert len(t.report.changed) == checks + 1

    _run_and_reverse(model, gm, t, check)


def test_cleanup_pipeline_on_export_is_exact_and_reverses(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    # EliminateDeadCode twice (one signature): reverse undoes its runs in order.
    passes = [
        EliminateDeadCode(),
        RemoveNoOps(),
        EliminateCommonSubexpressions(),
        EliminateDeadCode(),
    ]
    pipeline = compose(*passes)

    def check(candidate: torch.fx.GraphModule) -> None:
        removed = sum(len(p.report.changed) for p in passes if p.report is not None)
        assert len(candidate.graph.nodes) == len(gm.graph.nodes) - removed
        assert _count(candidate, torch.ops.aten.dropout.default) == 0

    _run_and_reverse(model, gm, pipeline, check)


class UserModule(torch.nn.Module):
    """Dropout, identity, clones, casts, same-shape views, repeated and unused expressions."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.drop = torch.nn.Dropout(0.3)
        self.identity = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.drop(self.identity(x))
        h = F.dropout(h, 0.2, training=self.training)
        h = self.fc(h).contiguous()
        h = h.to(torch.float32).float().view(4, 6)
        scale = h.size(-1) * 2  # repeated below
        a = h * scale
        b = (h * (h.size(-1) * 2)).clone()
        unused = torch.tanh(a).sum()  # noqa: F841  (dead code)
        kept = h.clone()
        kept.add_(1.0)  # in place: this clone stays
        returned = a.clone()  # the graph returns this copy: it stays
        return a + b + kept, returned


def test_user_module_in_symbolic_trace() -> None:
    model = UserModule().eval()
    x = torch.randn(4, 6)
    gm = torch.fx.symbolic_trace(model)
    ShapeProp(gm).propagate(x)  # dtypes and static shapes for the casts and views
    expected = model(x)
    code, names = gm.code, _names(gm)
    methods = collections.Counter(n.target for n in gm.graph.nodes if n.op == "call_method")
    assert methods["clone"] == 3 and methods["size"] == 2
    passes = [RemoveNoOps(), EliminateCommonSubexpressions(), EliminateDeadCode()]
    pipeline = compose(*passes)

    pipeline(gm)
    result = gm(x)
    for got, want in zip(result, expected):
        assert torch.equal(got, want)
    no_ops, cse, dce = (p.report for p in passes)
    assert no_ops is not None and cse is not None and dce is not None
    assert set(no_ops.changed) == {
        "identity", "drop", "dropout", "contiguous", "to", "float_1", "view", "clone"
    }  # fmt: skip
    skipped = dict(no_ops.skipped)
    assert skipped["clone_1"] == "a copy whose result or input is modified in place"
    assert skipped["clone_2"] == "the graph returns this copy; without it, it would return an alias"
    # h.size(-1) * 2 twice: the size call and the product merge, and with them the two h * s.
    assert set(cse.changed) == {"size_1", "mul_2", "mul_3"}
    assert set(dce.changed) == {"tanh", "sum_1"}
    remaining = collections.Counter(n.target for n in gm.graph.nodes if n.op == "call_method")
    assert remaining["clone"] == 2 and remaining["size"] == 1
    assert _count(gm, torch.nn.functional.dropout) == 0
    modules = {n.target for n in gm.graph.nodes if n.op == "call_module"}
    assert modules == {"fc"}  # drop and identity are gone

    pipeline(gm, reverse=True)
    assert gm.code == code
    assert _names(gm) == names
    for got, want in zip(gm(x), expected):
        assert torch.equal(got, want)


def test_training_mode_dropout_and_random_ops_stay() -> None:
    class Noisy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = F.dropout(x, 0.5, training=True)
            b = F.dropout(x, 0.5, training=True)  # same call, different random draw
            unused = torch.rand_like(x)  # noqa: F841  (dead, but it advances the generator)
            return a + b

    gm = torch.fx.symbolic_trace(Noisy())
    before = _names(gm)
    no_ops, cse, dce = RemoveNoOps(), EliminateCommonSubexpressions(), EliminateDeadCode()
    compose(no_ops, cse, dce)(gm)
    assert _names(gm) == before
    assert no_ops.report is not None and cse.report is not None and dce.report is not None
    assert dict(cse.report.skipped) == {"dropout_1": "repeats dropout, but it draws random numbers"}
    assert dict(dce.report.skipped) == {"rand_like": "unused, but kept: it draws random numbers"}
    assert [r for _, r in no_ops.report.skipped] == [
        "dropout in training mode (or training unknown) with p > 0"
    ] * 2


def test_reverse_works_on_a_deep_copy_in_a_later_session(exported: tuple[str, Any, Any]) -> None:
    name, model, gm = exported
    candidate = copy.deepcopy(gm)
    code = candidate.code
    pipeline = compose(RemoveNoOps(), EliminateCommonSubexpressions(), EliminateDeadCode())
    pipeline(candidate)
    # The records live in the graph: a copy reversed by new instances comes back exactly.
    restored = copy.deepcopy(candidate)
    compose(RemoveNoOps(), EliminateCommonSubexpressions(), EliminateDeadCode())(
        restored, reverse=True
    )
    assert restored.code == code
    assert _names(restored) == _names(gm)
