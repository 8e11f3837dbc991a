"""Issue 10: bad arguments, failures mid-composition, representability, save/load."""


import io
import operator

import pytest
import torch
from torch.fx import GraphModule

import fxopt
from linear_models import Parallel
from fxopt.optimization import (
    ChangeTrueDivToMulByInverse,
    MergeLinears,
    Transformation,
    compose,
)


class Boom(Transformation):
    def transform(self, graph_module: GraphModule) -> GraphModule:
        raise RuntimeError("boom")


class Double(Transformation):
    """A user pass that edits fx directly: the output, times two."""

    def transform(self, graph_module: GraphModule) -> GraphModule:
        output = next(n for n in graph_module.graph.nodes if n.op == "output")
        with graph_module.graph.inserting_before(output):
            doubled = graph_module.graph.call_function(operator.mul, (output.args[0], 2))
        output.args = (doubled,)
        return graph_module


@pytest.mark.parametrize("bad", [None, torch.nn.Linear(2, 2), "gm"])
def test_wrong_argument_types_are_type_errors(bad: object) -> None:
    for t in (MergeLinears(), compose(MergeLinears()), Double()):
        with pytest.raises(TypeError, match="takes a torch.fx.GraphModule"):
            t(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a torch.fx.GraphModule"):
        MergeLinears()(bad, reverse=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("members", [(MergeLinears, Boom), (Double, MergeLinears, Boom),
                                     (MergeLinears, Double, Boom)])  # fmt: skip
def test_failure_anywhere_in_compose_leaves_the_graph_module_as_it_was(members) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(2, 4)
    gm = fxopt.trace(Parallel().eval(), example_inputs=(x,), mode="symbolic")
    code, nodes = gm.code, [(n.name, n.op, n.target, n.args) for n in gm.graph.nodes]
    modules = dict(gm.named_modules())
    params = {k: (v, v.clone()) for k, v in gm.state_dict(keep_vars=True).items()}
    expected = gm(x)
    with pytest.raises(RuntimeError, match="boom"):
        compose(*(m() for m in members))(gm)
    assert gm.code == code
    assert [(n.name, n.op, n.target, n.args) for n in gm.graph.nodes] == nodes
    assert dict(gm.named_modules()) == modules
    for name, value in gm.state_dict(keep_vars=True).items():
        assert value is params[name][0] and torch.equal(value, params[name][1])
    assert torch.equal(gm(x), expected)  # runnable


def test_inplace_compose_with_a_python_member_edits_the_callers_module() -> None:
    x = torch.randn(2, 4)
    gm = fxopt.trace(Parallel().eval(), example_inputs=(x,), mode="symbolic")
    expected = gm(x) * 2
    result = compose(MergeLinears(), Double())(gm)
    assert result is gm
    torch.testing.assert_close(gm(x), expected)
    assert "narrow" in gm.code and "mul" in gm.code


def test_division_by_a_tiny_constant_is_not_turned_into_an_infinite_product() -> None:
    class Div(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / 1e-39

    x = torch.full((3,), 1e-3)
    for mode in ("symbolic", "export"):
        gm = fxopt.trace(Div(), example_inputs=(x,), mode=mode)  # type: ignore[arg-type]
        t = ChangeTrueDivToMulByInverse()
        out = t(gm)
        assert torch.isfinite(out(x)).all()
        assert t.report is not None and not t.report.changed
        assert "not a normal number in float" in t.report.skipped[0][1]


def test_reverse_after_save_and_load_says_why_it_cannot() -> None:
    gm = torch.fx.symbolic_trace(Parallel().eval())
    merged = MergeLinears()(gm)
    buffer = io.BytesIO()
    torch.save(merged, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    with pytest.raises(fxopt.optimization.TransformationError, match="torch.save"):
        MergeLinears()(loaded, reverse=True)


def test_unknown_model_type_names_the_nearest_types(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fxopt.cli.models import ModelError, _from_config_file

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "brt"}')
    with pytest.raises(ModelError) as info:
        _from_config_file(path)
    message = str(info.value)
    assert "did you mean" in message and "bert" in message and len(message) < 300


def test_calibration_batches_that_do_not_fit_the_forward_are_refused_before_the_trace(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Several dict batches given as `calibration` (one batch goes there) would bind to
    `input_ids` and `attention_mask` and fail deep inside calibration; they, and a held-out batch
    the forward cannot take, are refused up front, naming what to do, and nothing is traced."""
    import transformers

    from conftest import build_model, tiny_bert_config, token_inputs
    from fxopt.optimization import trace_cache

    model = build_model(transformers.BertModel, tiny_bert_config())
    batch = token_inputs(2, 8)
    traced: list[object] = []
    monkeypatch.setattr(trace_cache, "trace", lambda *args, **kwargs: traced.append(args))
    with pytest.raises(ValueError, match=r"calibration is one batch of inputs .* not a list of 2 dict batches"):
        fxopt.optimize(model, "fast", example_inputs=batch, calibration=[batch, batch])
    with pytest.raises(ValueError, match=r"held_out\[1\] do not fit BertModel\.forward: too many positional"):
        fxopt.optimize(model, "fast", example_inputs=batch, calibration=batch, held_out=[batch, [batch["input_ids"]] * 20])
    assert traced == []
    monkeypatch.undo()
    # One batch fits, positional or by name.
    for calibration in ((batch["input_ids"], batch["attention_mask"]), batch):
        optimized = fxopt.optimize(model, "fast", example_inputs=batch, calibration=calibration)
        assert fxopt.verify(model, optimized, batch).min_cosine >= 0.99
