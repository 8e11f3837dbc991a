"""The built-in transformations, under ``optimum.fx.optimization``'s names."""

from __future__ import annotations

from .builtin import BuiltinTransformation


class ChangeTrueDivToMulByInverse(BuiltinTransformation):
    """Division by a constant number becomes multiplication by its inverse.

    Fires on ``a / c``, ``torch.div(a, c)``, ``torch.true_divide``, ``a.div(c)`` / ``div_`` and
    ``aten.div`` in exported graphs. Skips a zero divisor, an inverse that is not a normal float
    and any ``rounding_mode``. Reverse puts back the original divisor object, so ``x / 8``
    comes back as ``x / 8``, not ``x / (1 / 0.125)``.
    """

    core_pass = "ChangeTrueDivToMulByInverse"
    preserves_computation = True
