"""Example inputs for tracing: normalising the ones a user gives, building valid ones for
transformers models, and naming the dimensions that are expected to vary.

`fxopt.trace` needs concrete inputs for `torch.export`. A transformers model carries everything
needed to invent valid ones in its config (vocabulary size, image size, mel bins, position
limits), so users of those models never have to write them by hand. A plain `nn.Module` has no
such description: its user must pass `example_inputs`.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union, cast

import torch
from torch import nn

Inputs = Union[torch.Tensor, tuple[Any, ...], list[Any], Mapping[str, Any]]
"""What a caller may pass as model inputs: a tensor, positional arguments or keyword arguments."""

BATCH_SIZE = 2
"""Dummy batch size; at least 2, as torch.export always fixes dimensions of example size 0 or 1."""

SEQUENCE_LENGTH = 8
"""Dummy encoder sequence length (clipped to the model's position limit)."""

DECODER_SEQUENCE_LENGTH = 6
"""Dummy decoder length; differs from the encoder's so a graph confusing the two cannot hide it."""

# Sub-configs searched, in order, for an attribute the top-level config lacks (composite models).
_SUB_CONFIGS = ("text_config", "encoder", "decoder", "vision_config", "audio_config")

# Dimensions expected to vary, per well-known input name; other inputs follow `varying_dims`' rules.
_NAMED_VARYING_DIMS: dict[str, tuple[int, ...]] = {
    "pixel_values": (0, 2, 3),  # batch, height, width
    "input_features": (0, 2),  # batch, frames (Whisper layout: batch, mel bins, frames)
    "input_values": (0, 1),  # batch, samples (raw audio)
    "inputs_embeds": (0, 1),  # batch, sequence
    "decoder_inputs_embeds": (0, 1),
}


def split_inputs(inputs: Inputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Turn the accepted input forms into `(args, kwargs)`, so every caller invokes models alike."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    raise TypeError(
        f"inputs must be a tensor, a tuple of positional arguments or a dict of keyword "
        f"arguments, not {type(inputs).__name__}"
    )


def bound_inputs(model: nn.Module, inputs: Inputs, what: str) -> inspect.BoundArguments:
    """`inputs` bound to `model.forward`'s parameters (those omitted keep their defaults); a
    ValueError naming `what` where they do not fit, or where they are several dict batches
    (a list or tuple of dicts), which would bind as positional arguments one batch each (two
    tokenized batches to `input_ids` and `attention_mask`) and fail far from here, if at all.
    (A forward that takes dicts positionally gets them by name: a dict of dicts.)"""
    if isinstance(inputs, (tuple, list)) and len(inputs) > 1 and all(isinstance(i, Mapping) for i in inputs):
        raise ValueError(
            f"{what} is one batch of inputs (a tensor, a tuple of positional arguments or a dict of "
            f"keyword arguments), not a {type(inputs).__name__} of {len(inputs)} dict batches: "
            "concatenate them into one (torch.cat along the batch dimension)"
        )
    args, kwargs = split_inputs(inputs)
    try:
        return inspect.signature(model.forward).bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{what} do not fit {type(model).__name__}.forward: {exc}") from exc


def is_pretrained_model(model: nn.Module) -> bool:
    """Whether `model` is a transformers `PreTrainedModel`, without importing transformers.

    If transformers was never imported, no object can be an instance of its classes, so fxopt
    keeps working (and importing fast) where transformers is not installed.
    """
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def forward_parameter_names(model: nn.Module) -> list[str]:
    """Names `model.forward` accepts as named arguments, in signature order (no *args/**kwargs)."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    parameters = inspect.signature(model.forward).parameters.values()
    return [p.name for p in parameters if p.kind not in variadic]


def default_input_names(model: nn.Module) -> list[str]:
    """The inputs a typical inference call of a transformers model passes.

    The model's `main_input_name`, plus `attention_mask` for token inputs and
    `decoder_input_ids` for encoder-decoder models (T5, BART, Whisper), which cannot run without
    them. Everything else (token_type_ids, position_ids, ...) keeps its default.
    """
    accepted = set(forward_parameter_names(model))
    main = str(model.main_input_name)
    names = [main]
    if main == "input_ids" and "attention_mask" in accepted:
        names.append("attention_mask")
    if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in accepted:
        names.append("decoder_input_ids")
    return names


def build_dummy_inputs(model: nn.Module, input_names: Sequence[str]) -> dict[str, torch.Tensor]:
    """Valid random inputs for a transformers model, derived from its config.

    Token ids lie inside the vocabulary, sequence lengths inside the position limits, and image
    and audio tensors have the channels, size and dtype the model was configured with. Raises
    ValueError for an input name this module does not know how to invent.
    """
    config = model.config
    generator = torch.Generator().manual_seed(0)
    inputs: dict[str, torch.Tensor] = {}
    for name in input_names:
        builder = _BUILDERS.get(name)
        if builder is None:
            raise ValueError(
                f"fxopt cannot invent a value for input {name!r} of {type(model).__name__}; "
                f"pass example_inputs (known names: {', '.join(sorted(_BUILDERS))})"
            )
        dtype, device = cast(torch.dtype, model.dtype), cast(torch.device, model.device)
        inputs[name] = builder(config, generator, dtype).to(device)
    return inputs


def image_size_dims(name: str, value: torch.Tensor) -> tuple[int, ...]:
    """The height and width dimensions of an image input; none for other inputs.

    Images are what `varying_dims` takes them for: `pixel_values`, or 4-D float tensors of no
    other well-known name.
    """
    dims = varying_dims(name, value)
    is_image = name == "pixel_values" or (
        name not in _NAMED_VARYING_DIMS and value.is_floating_point() and value.dim() == 4
    )
    return tuple(d for d in dims if d in (2, 3)) if is_image else ()


def default_dynamic_dims(name: str, value: torch.Tensor) -> tuple[int, ...]:
    """The dimensions fxopt keeps dynamic by default: `varying_dims` but an image's height and
    width (see `fxopt.trace`'s `dynamic`)."""
    images = image_size_dims(name, value)
    return tuple(d for d in varying_dims(name, value) if d not in images)


def varying_dims(name: str, value: torch.Tensor) -> tuple[int, ...]:
    """Dimensions of an input that callers are expected to vary between calls.

    Well-known transformers names use their layout (`pixel_values`: batch, height, width).
    Otherwise: integer and bool tensors are ids or masks (batch, sequence), 4-D float tensors are
    images (batch, height, width), and other float tensors vary only in batch, because their
    trailing dimensions are usually feature sizes that weights fix anyway.
    """
    if name in _NAMED_VARYING_DIMS:
        dims = _NAMED_VARYING_DIMS[name]
    elif not value.is_floating_point():
        dims = (0, 1)
    elif value.dim() == 4:
        dims = (0, 2, 3)
    else:
        dims = (0,)
    return tuple(d for d in dims if d < value.dim())


def _config_value(config: Any, attribute: str, prefer: tuple[str, ...] = ()) -> Any:
    """Read `attribute` from a config or, for composite models, from its sub-configs.

    `prefer` names sub-configs to look in first (a decoder input reads the decoder's vocabulary).
    Returns None when no config level defines it.
    """
    for sub in (*prefer, None, *_SUB_CONFIGS):
        level = config if sub is None else getattr(config, sub, None)
        value = getattr(level, attribute, None) if level is not None else None
        if value is not None:
            return value
    return None


def _sequence_length(
    config: Any, limit_attribute: str, wanted: int, prefer: tuple[str, ...] = ()
) -> int:
    """`wanted`, clipped to the position limit the config declares (if any)."""
    limit = _config_value(config, limit_attribute, prefer)
    return min(wanted, limit) if isinstance(limit, int) else wanted


def _token_ids(
    config: Any, generator: torch.Generator, length: int, prefer: tuple[str, ...] = ()
) -> torch.Tensor:
    """Random token ids inside the vocabulary."""
    vocab_size = _config_value(config, "vocab_size", prefer)
    if not isinstance(vocab_size, int):
        raise ValueError(f"{type(config).__name__} declares no vocab_size; pass example_inputs")
    return torch.randint(0, vocab_size, (BATCH_SIZE, length), generator=generator)


def _encoder_length(config: Any) -> int:
    return _sequence_length(config, "max_position_embeddings", SEQUENCE_LENGTH)


def _decoder_length(config: Any) -> int:
    length = _sequence_length(config, "max_target_positions", DECODER_SEQUENCE_LENGTH)
    return _sequence_length(config, "max_position_embeddings", length, prefer=("decoder",))


def _input_ids(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return _token_ids(config, generator, _encoder_length(config))


def _decoder_input_ids(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return _token_ids(config, generator, _decoder_length(config), prefer=("decoder",))


def _attention_mask(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return torch.ones(BATCH_SIZE, _encoder_length(config), dtype=torch.long)


def _decoder_attention_mask(
    config: Any, generator: torch.Generator, dtype: torch.dtype
) -> torch.Tensor:
    return torch.ones(BATCH_SIZE, _decoder_length(config), dtype=torch.long)


def _token_type_ids(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(BATCH_SIZE, _encoder_length(config), dtype=torch.long)


def _position_ids(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(_encoder_length(config)).expand(BATCH_SIZE, -1).contiguous()


def _pixel_values(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Images of the configured channel count and size (square when the size is one number)."""
    channels = _config_value(config, "num_channels", prefer=("vision_config",)) or 3
    size = _config_value(config, "image_size", prefer=("vision_config",)) or 224
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    return torch.randn(BATCH_SIZE, channels, height, width, generator=generator).to(dtype)


def _input_features(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Whisper-style log-mel features: (batch, num_mel_bins, 2 * max_source_positions).

    Whisper's encoder halves the frame count with a stride-2 convolution and insists the result
    equals max_source_positions, so the frame count is fixed by the config.
    """
    mel_bins = _config_value(config, "num_mel_bins")
    positions = _config_value(config, "max_source_positions")
    if not isinstance(mel_bins, int) or not isinstance(positions, int):
        raise ValueError(
            f"{type(config).__name__} has no num_mel_bins/max_source_positions to shape "
            "input_features from; pass example_inputs"
        )
    return torch.randn(BATCH_SIZE, mel_bins, 2 * positions, generator=generator).to(dtype)


def _input_values(config: Any, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Raw audio long enough for the feature encoder's convolutions to emit a few frames."""
    kernels = _config_value(config, "conv_kernel")
    strides = _config_value(config, "conv_stride")
    if kernels is None or strides is None:
        raise ValueError(
            f"{type(config).__name__} has no conv_kernel/conv_stride to size input_values from; "
            "pass example_inputs"
        )
    length = SEQUENCE_LENGTH  # output frames wanted; walk the convolutions backwards
    for kernel, stride in zip(reversed(kernels), reversed(strides)):
        length = (length - 1) * stride + kernel
    return torch.randn(BATCH_SIZE, length, generator=generator).to(dtype)


_Builder = Callable[[Any, torch.Generator, torch.dtype], torch.Tensor]

_BUILDERS: dict[str, _Builder] = {
    "input_ids": _input_ids,
    "attention_mask": _attention_mask,
    "token_type_ids": _token_type_ids,
    "position_ids": _position_ids,
    "decoder_input_ids": _decoder_input_ids,
    "decoder_attention_mask": _decoder_attention_mask,
    "pixel_values": _pixel_values,
    "input_features": _input_features,
    "input_values": _input_values,
}
