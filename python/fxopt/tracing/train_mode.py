"""Models in train() mode: inference optimization works on their eval() view, and says so.

A transformers model built from a config starts in train mode, and so does any freshly built
nn.Module. Traced as it is, its graph keeps dropout active (two calls differ) and batch norms
on batch statistics (nothing folds), silently. `fxopt.trace` captures the mode it is given, as
documented, but warns; `fxopt.optimize` (inference optimization) traces and optimizes the
model as in eval() and warns once that it did, leaving the user's model in its own mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


class TrainModeWarning(UserWarning):
    """The model was in train() mode: said once per trace or optimize call."""


def in_train_mode(model: nn.Module) -> bool:
    """Whether `model` or any of its submodules is in train mode."""
    return any(module.training for module in model.modules())


def train_mode_message(model: nn.Module, action: str) -> str:
    return (
        f"{type(model).__name__} is in train() mode (dropout active, batch norms on batch "
        f"statistics); {action}. Call model.eval() first to silence this warning."
    )


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """`model` and its submodules in eval mode inside; each module's own mode put back after."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
