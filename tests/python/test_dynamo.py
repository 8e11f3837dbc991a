"""The Dynamo dialect: every built-in pass on TorchDynamo graphs of transformers 5 models.

`fxopt.trace(mode="dynamo")` graphs hold Python operators, torch functions and tensor methods
(`operator.mul`, `torch._C._nn.linear`, `torch.matmul`, `x.view(...)`) with weights as
`get_attr`. Each pass must fire on them through the engine's op views, keep eager's outputs
(within the pass's declared accuracy), change the node counts its rewrite implies, and reverse
to the very same code, outputs and parameters. Optimum's documented examples, whose user passes
match `operator.mul`, must change nodes of a transformers 5 BERT.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers
from torch import nn

import fxopt
from conftest import build_model, tiny_bert_config, tiny_gpt2_config, token_inputs
from fxopt.optimization import (
    BuiltinTransformation,
    ChangeActivation,
    ChangePrecision,
    ChangeTrueDivToMulByInverse,
    ConvWeightsChannelsLast,
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    FuseAttentionToSdpa,
    FuseBatchNorm1dInLinear,
    FuseBatchNorm2dInConv2d,
    FuseBatchNormInConv,
    FuseBiasInLinear,
    FuseLinearActivationOneDnn,
    GeluToTanhApproximation,
    MergeLinears,
    QuantizeLinearsInt8,
    RecognizeLinears,
    RemoveNoOps,
    RemoveRuntimeAsserts,
    ReversibleTransformation,
    Transformation,
    compose,
)
from linear_models import tiny_llama_config
from norm_models import tiny_resnet

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class LinearBatchNorm(nn.Module):
    """Linear -> BatchNorm1d on 2-D inputs: no transformers model has it, Optimum's pass needs it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.fc(x)))


class Checked(nn.Module):
    """A model that checks its input's width: Dynamo records the check as an assert node."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[1] == 4)
        return self.fc(x)


def _megatron() -> nn.Module:
    config = transformers.MegatronBertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return build_model(transformers.MegatronBertModel, config)


def _vit() -> nn.Module:
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    return build_model(transformers.ViTModel, config)


# name -> (model factory, inputs for the checks; another size than the traced dummies where the
# graph is dynamic, so the checks also cover sizes the trace did not see: batch and sequence,
# not an image's height and width, which fxopt.trace fixes by default; ResNet's config has no
# image size, so its dummies are 224x224)
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], dict[str, torch.Tensor]]]] = {
    "bert": (lambda: build_model(transformers.BertModel, tiny_bert_config()), lambda: token_inputs(3, 11)),
    "bert-eager": (
        lambda: build_model(transformers.BertModel, tiny_bert_config(attn_implementation="eager")),
        lambda: token_inputs(3, 11),
    ),
    "megatron-bert": (_megatron, lambda: token_inputs(3, 11)),
    "gpt2": (lambda: build_model(transformers.GPT2LMHeadModel, tiny_gpt2_config()), lambda: token_inputs(3, 11)),
    "llama": (lambda: build_model(transformers.LlamaModel, tiny_llama_config()), lambda: token_inputs(3, 11)),
    "vit": (_vit, lambda: {"pixel_values": torch.randn(3, 3, 32, 32)}),
    "resnet": (tiny_resnet, lambda: {"pixel_values": torch.randn(3, 3, 224, 224)}),
    "linear-bn": (lambda: LinearBatchNorm().eval(), lambda: {"x": torch.randn(5, 8)}),
    "checked": (lambda: Checked().eval(), lambda: {"x": torch.randn(5, 4)}),
}

_traced: dict[str, tuple[nn.Module, torch.fx.GraphModule]] = {}


def traced(name: str) -> tuple[nn.Module, torch.fx.GraphModule]:
    """The model and its dynamo graph, traced once per test session."""
    if name not in _traced:
        build, make_inputs = MODELS[name]
        model = build()
        example = None if isinstance(model, transformers.PreTrainedModel) else make_inputs()
        graph_module = fxopt.trace(model, example_inputs=example, mode="dynamo")
        assert graph_module.meta["fxopt_trace"]["mode"] == "dynamo"
        _traced[name] = model, graph_module
    return _traced[name]


def is_linear(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch._C._nn.linear


def count(gm: torch.fx.GraphModule, predicate: Callable[[torch.fx.Node], bool]) -> int:
    return sum(1 for node in gm.graph.nodes if predicate(node))


def calls(target: Any) -> Callable[[torch.fx.Node], bool]:
    return lambda node: node.op == "call_function" and node.target is target


def linear_with_bias(node: torch.fx.Node) -> bool:
    return is_linear(node) and len(node.args) > 2 and node.args[2] is not None


def gelu_tanh(node: torch.fx.Node) -> bool:
    return node.target is torch._C._nn.gelu and node.kwargs.get("approximate") == "tanh"


def any_node(node: torch.fx.Node) -> bool:
    return True


# (pass, model, what to count, count in the traced graph, count after the pass), with why.
Case = tuple[Callable[[], BuiltinTransformation], str, Callable[[torch.fx.Node], bool], int | None, int | None]
CASES: list[Case] = [
    # Megatron's eager attention divides the scores by sqrt(head size) in each of 2 layers.
    (ChangeTrueDivToMulByInverse, "megatron-bert", calls(operator.truediv), 2, 0),
    # 2 layers x (q, k, v) become one Linear per layer: 13 Linears -> 9.
    (MergeLinears, "bert", is_linear, 13, 9),
    # Llama: q/k/v and gate/up merge in each of 2 layers: 14 -> 14 - 2 * (2 + 1) = 8.
    (MergeLinears, "llama", is_linear, 14, 8),
    # Every one of BERT's 13 Linears has a bias, folded into its weight.
    (FuseBiasInLinear, "bert", linear_with_bias, 13, 0),
    # ResNet's 8 convolutions are each followed by a batch norm.
    (FuseBatchNorm2dInConv2d, "resnet", calls(torch.nn.functional.batch_norm), 8, 0),
    (FuseBatchNormInConv, "resnet", calls(torch.nn.functional.batch_norm), 8, 0),
    (FuseBatchNorm1dInLinear, "linear-bn", calls(torch.nn.functional.batch_norm), 1, 0),
    # Channels-last weights keep every convolution; the count that changes is of tensors.
    (ConvWeightsChannelsLast, "resnet", calls(torch.conv2d), 8, 8),
    # Eval dropout is a no-op: embeddings, 2 per layer x 2 layers = 5.
    (RemoveNoOps, "bert", calls(torch.nn.functional.dropout), 5, 0),
    # Llama's mask and rotary code computes some values twice (aranges, cos/sin).
    # Removal passes: None counts mean "one node fewer per node the report says it removed".
    (EliminateCommonSubexpressions, "llama", any_node, None, None),
    (EliminateDeadCode, "bert", any_node, None, None),
    (RemoveRuntimeAsserts, "checked", calls(torch.ops.aten._assert_scalar.default), 1, 0),
    # The eager attention of BERT (matmul, scale, mask, softmax, matmul) in 2 layers.
    (FuseAttentionToSdpa, "bert-eager", calls(torch.nn.functional.softmax), 2, 0),
    (FuseAttentionToSdpa, "megatron-bert", calls(torch.nn.functional.softmax), 2, 0),
    # GPT-2's Conv1D is addmm: 4 per layer x 2 layers become Linears.
    (RecognizeLinears, "gpt2", calls(torch.addmm), 8, 0),
    (FuseLinearActivationOneDnn, "bert", is_linear, 13, 0),
    (FuseLinearActivationOneDnn, "llama", is_linear, 14, 0),
    # One exact GELU per layer.
    (GeluToTanhApproximation, "bert", gelu_tanh, 0, 2),
    (lambda: ChangeActivation("relu", "silu"), "resnet", calls(torch.nn.functional.relu), 7, 0),
    (lambda: ChangePrecision(dtype=torch.bfloat16), "bert", is_linear, 13, 13),
    (lambda: ChangePrecision(dtype=torch.bfloat16), "resnet", calls(torch.conv2d), 8, 8),
    # Every float32 Linear becomes a per-token int8 call (the static choice).
    (QuantizeLinearsInt8, "bert", is_linear, 13, 0),
]


def relu_to_silu(model: nn.Module) -> nn.Module:
    """The eager reference of ChangeActivation("relu", "silu"): a copy with every ReLU a SiLU."""
    reference = copy.deepcopy(model)
    for name, module in list(reference.named_modules()):
        if isinstance(module, nn.ReLU):
            parent, _, attribute = name.rpartition(".")
            setattr(reference.get_submodule(parent), attribute, nn.SiLU())
    return reference


def outputs(module: Callable[..., Any], inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        result = module(**inputs)
    return [leaf for leaf in torch.utils._pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]


@pytest.mark.parametrize(
    "make_pass, model_name, predicate, before, after",
    CASES,
    ids=[f"{case[0]().__class__.__name__}-{case[1]}" for case in CASES],
)
def test_pass_fires_on_dynamo_graph_matches_eager_and_reverses_exactly(
    make_pass: Callable[[], BuiltinTransformation],
    model_name: str,
    predicate: Callable[[torch.fx.Node], bool],
    before: int | None,
    after: int | None,
) -> None:
    model, original = traced(model_name)
    inputs = MODELS[model_name][1]()
    gm = copy.deepcopy(original)
    code, expected = gm.code, outputs(gm, inputs)
    states = {name: tensor.clone() for name, tensor in gm.state_dict().items()}
    counted = count(gm, predicate)
    assert before is None or counted == before

    transformation = make_pass()
    transformed = transformation(gm)
    report = transformation.report
    assert report is not None and report.changed, report
    expected_after = counted - len(report.changed) if after is None else after
    assert count(transformed, predicate) == expected_after
    if model_name == "resnet" and isinstance(transformation, ConvWeightsChannelsLast):
        reads = [n.args[1] for n in transformed.graph.nodes if calls(torch.conv2d)(n)]
        weights = [transformed.get_parameter(read.target) for read in reads]
        assert all(w.is_contiguous(memory_format=torch.channels_last) for w in weights)
    if transformation.preserves_computation:
        verified = fxopt.verify(model, transformed, inputs)
    elif isinstance(transformation, ChangeActivation) and transformation.target == "silu":
        verified = fxopt.verify(relu_to_silu(model), transformed, inputs)
    else:  # bfloat16, int8, tanh GELU: close, not equal
        verified = fxopt.verify(model, transformed, inputs, rtol=0.2, atol=0.2)
    assert verified.ok, str(verified)

    restored = transformation(transformed, reverse=True)
    assert restored.code == code
    for got, want in zip(outputs(restored, inputs), expected, strict=True):
        assert torch.equal(got, want)
    restored_states = restored.state_dict()
    for name, tensor in states.items():
        assert torch.equal(restored_states[name], tensor), name


@pytest.mark.parametrize("model_name", ["bert", "megatron-bert", "gpt2", "llama", "vit"])
def test_default_preset_on_dynamo_graphs_matches_eager(model_name: str) -> None:
    model, original = traced(model_name)
    inputs = MODELS[model_name][1]()
    transformation = fxopt.preset("default", inplace=False)
    optimized = transformation(original)
    changed = sum(len(t.report.changed) for t in transformation.transformations if t.report)
    assert changed > 0
    assert len(optimized.graph.nodes) < len(original.graph.nodes)
    report = fxopt.verify(model, optimized, inputs)
    assert report.ok, str(report)
    restored = transformation(optimized, reverse=True)
    assert restored.code == original.code


def test_dynamo_graph_holds_torch_level_operations() -> None:
    model, gm = traced("bert-eager")
    targets = {node.target for node in gm.graph.nodes if node.op == "call_function"}
    assert {operator.mul, operator.add, torch._C._nn.linear, torch.matmul} <= targets
    assert not any(isinstance(target, torch._ops.OpOverload) and "aten.linear" in str(target) for target in targets)
    attributes = {node.target for node in gm.graph.find_nodes(op="get_attr")}
    assert any(target.endswith("query.weight") for target in attributes)
    info = gm.meta["fxopt_trace"]
    assert info["dynamic_dims"] == {"input_ids": [0, 1], "attention_mask": [0, 1]}


# --- Optimum's documented examples ------------------------------------------------------------


class ChangeMulToAdd(Transformation):
    """Optimum's documentation: a Transformation that edits fx nodes itself."""

    preserves_computation = False

    def transform(self, graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == operator.mul:
                node.target = operator.add
        return graph_module


class MulToMulTimesTwo(ReversibleTransformation):
    """Optimum's documentation: a reversible user pass that marks what it changed."""

    def transform(self, graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target == operator.mul:
                x, y = node.args
                node.args = (x, 2 * y)
                self.mark_as_transformed(node)
        return graph_module

    def reverse(self, graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in self.get_transformed_nodes(graph_module):
            if node.op == "call_function" and node.target == operator.mul:
                x, y = node.args
                node.args = (x, y / 2)
                self.mark_as_restored(node)
        return graph_module


def mul_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target == operator.mul]


def test_optimum_user_passes_change_dynamo_bert() -> None:
    # transformers 5's eager BERT attention scales the scores by `* scaling` in each of 2 layers.
    model, gm = traced("bert-eager")
    inputs = token_inputs(2, 8)
    muls = len(mul_nodes(gm))
    assert muls == 2

    added = ChangeMulToAdd()(copy.deepcopy(gm))
    assert mul_nodes(added) == []
    assert count(added, calls(operator.add)) == count(gm, calls(operator.add)) + muls
    assert not fxopt.verify(model, added, inputs).ok  # it changes the computation, as documented

    doubled = MulToMulTimesTwo()
    result = doubled(copy.deepcopy(gm))
    assert len(doubled.get_transformed_nodes(result)) == muls
    restored = doubled(result, reverse=True)
    assert doubled.get_transformed_nodes(restored) == []
    assert fxopt.verify(model, restored, inputs).ok


def test_optimum_compose_example_on_dynamo_bert() -> None:
    model, gm = traced("bert")
    inputs = token_inputs(2, 8)
    composition = compose(ChangeTrueDivToMulByInverse(), MergeLinears(), inplace=False)
    transformed = composition(gm)
    assert count(transformed, is_linear) == count(gm, is_linear) - 4
    assert fxopt.verify(model, transformed, inputs).ok
    restored = composition(transformed, reverse=True)
    assert restored.code == gm.code


def test_compose_of_user_and_builtin_passes_on_dynamo_bert() -> None:
    model, gm = traced("bert-eager")
    inputs = token_inputs(2, 8)
    composition = compose(MulToMulTimesTwo(), MergeLinears(), FuseAttentionToSdpa(), inplace=False)
    transformed = composition(gm)
    assert count(transformed, is_linear) == count(gm, is_linear) - 4
    assert count(transformed, calls(torch.nn.functional.softmax)) == 0
    restored = composition(transformed, reverse=True)
    assert restored.code == gm.code
    for got, want in zip(outputs(restored, inputs), outputs(gm, inputs), strict=True):
        assert torch.equal(got, want)
    assert fxopt.verify(model, restored, inputs).ok
