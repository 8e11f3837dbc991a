"""`fxopt.verify`: check that a transformed graph still computes what the original computed.

Both callables run on the same inputs; their outputs are flattened with torch's pytree into
named leaves (`last_hidden_state`, `past_key_values.0`, `1.0` for nested tuples) and compared
leaf by leaf. The report says, per output, how far apart the two are and whether that is within
tolerance, so a failing transformation points at the output it broke.

Default tolerances depend on the dtype, because a rewrite that reorders floating-point
arithmetic (fusing a BatchNorm into a convolution, merging linears) changes results by a few
units in the last place of that dtype, accumulated over the graph:

    dtype            rtol     atol     why
    float64          1e-7     1e-7     as torch.testing: reordering errors are ~1e-15
    float32          1e-4     1e-5     ~1000 ulps (eps 1.2e-7) of rounding through a deep graph
    float16          1e-2     1e-3     eps 9.8e-4: ten ulps
    bfloat16         1.6e-2   1e-2     eps 7.8e-3: two ulps (torch.testing's rtol)
    other floats     as bfloat16
    integer, bool    0        0        exact: indices and masks must not change

The default atol is for outputs of magnitude up to 1. Rounding error grows with the size of the
values summed, so for a leaf whose largest finite magnitude m exceeds 1 the default atol is
multiplied by m: ResNet-50's logits (up to ~90) after folding 53 BatchNorms differ from eager by
~5e-5, a relative 5e-7, which a fixed 1e-5 would call a failure. An explicit `atol` is used as
given. A leaf compared across two dtypes uses the looser tolerance of the two. Complex tensors use the
tolerance of their real dtype. Non-tensor leaves (ints, strings, None) must be equal.

Each floating-point row also reports the cosine similarity of the two tensors taken as flat vectors:
the measure of drift that stays readable when a lower precision (bfloat16, int8) moves every
element a little. It does not decide `ok`; callers that declare a minimum (the `--preset` accuracy
of the command line) check it themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from ..tracing.dummy_inputs import Inputs, split_inputs
from ..tracing.trace import register_cache_pytrees

if TYPE_CHECKING:
    from rich.table import Table

_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
_EXACT = (0.0, 0.0)

_COLUMNS = (
    "output",
    "shape",
    "dtype",
    "max abs err",
    "max rel err",
    "cosine",
    "rtol",
    "atol",
    "result",
    "note",
)
_NUMERIC_COLUMNS = ("max abs err", "max rel err", "cosine", "rtol", "atol")
CRITERION = (
    "pass: every element within atol + rtol x |reference| (torch.isclose), so a large max rel "
    "err where the reference is near 0 can pass; atol is scaled by an output's largest "
    "magnitude above 1 (note column)"
)
"""How a row passes, printed under every table: the relative error alone is not the test."""


@dataclass(frozen=True)
class VerifyRow:
    """The comparison of one output leaf (or one structural difference)."""

    name: str
    """Leaf path, e.g. `last_hidden_state` or `past_key_values.0`; `output` for a bare tensor."""
    ok: bool
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    """Largest |candidate - reference| / |reference| over elements where reference is non-zero."""
    cosine: float | None = None
    """Cosine similarity of candidate and reference as flat vectors (float64, elements finite in
    both); None for integer and bool outputs."""
    rtol: float | None = None
    atol: float | None = None
    note: str = ""
    """Why the row failed when it is not a numeric mismatch (missing output, shape, value)."""

    def cells(self) -> tuple[str, ...]:
        """The row as table cells, in `_COLUMNS` order."""
        return (
            self.name,
            "" if self.shape is None else "x".join(map(str, self.shape)) or "scalar",
            self.dtype or "",
            _number(self.max_abs_err),
            _number(self.max_rel_err),
            _cosine_text(self.cosine),
            _number(self.rtol),
            _number(self.atol),
            "pass" if self.ok else "FAIL",
            self.note,
        )


@dataclass(frozen=True)
class VerifyReport:
    """Per-output comparison of a candidate against a reference; `ok` when every row passes."""

    rows: list[VerifyRow]

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def failures(self) -> list[VerifyRow]:
        return [row for row in self.rows if not row.ok]

    @property
    def min_cosine(self) -> float | None:
        """The lowest cosine similarity over the floating-point outputs; None if there are none."""
        cosines = [row.cosine for row in self.rows if row.cosine is not None]
        return min(cosines) if cosines else None

    def __str__(self) -> str:
        """A plain-text table, one line per output, for logs and terminals without rich."""
        table = [_COLUMNS, *(row.cells() for row in self.rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
            for line in table
        ]
        lines.insert(1, "  ".join("-" * width for width in widths))
        failed = len(self.failures)
        verdict = "verify: ok" if self.ok else f"verify: FAILED ({failed} of {len(self.rows)} rows)"
        return "\n".join([*lines, CRITERION, verdict])

    def rich_table(self) -> Table:
        """The same table as a rich Table, failures in red."""
        from rich.table import Table

        table = Table(title="fxopt.verify: " + ("ok" if self.ok else "FAILED"), caption=CRITERION)
        for column in _COLUMNS:
            table.add_column(column, justify="right" if column in _NUMERIC_COLUMNS else "left")
        for row in self.rows:
            table.add_row(*row.cells(), style=None if row.ok else "red")
        return table


def verify(
    reference: Callable[..., Any],
    candidate: Callable[..., Any],
    inputs: Inputs,
    rtol: float | None = None,
    atol: float | None = None,
    *,
    scale_atol: bool = False,
) -> VerifyReport:
    """Run `reference` and `candidate` on `inputs` and compare their outputs leaf by leaf.

    Args:
        reference, candidate: eager modules, GraphModules or any callables.
        inputs: one tensor, a tuple of positional arguments or a dict of keyword arguments.
            Each callable gets its own copy, so in-place updates by one cannot leak into the other.
        rtol, atol: override the dtype-aware defaults (module docstring) for every tensor leaf.
        scale_atol: multiply an explicit `atol` by each leaf's largest magnitude (at least 1), as
            the default atol is: a tolerance stated for outputs of magnitude up to 1.

    Both run under torch.no_grad(). Outputs missing from either side, differing container
    types, shapes or non-tensor values are failures, reported as rows.
    """
    register_cache_pytrees(reference)
    register_cache_pytrees(candidate)
    with torch.no_grad():
        expected = _call(reference, inputs)
        actual = _call(candidate, inputs)
    expected_leaves, expected_spec = pytree.tree_flatten_with_path(expected)
    actual_leaves, actual_spec = pytree.tree_flatten_with_path(actual)
    expected_named = {_leaf_name(path): leaf for path, leaf in expected_leaves}
    actual_named = {_leaf_name(path): leaf for path, leaf in actual_leaves}
    rows = [
        _compare(name, leaf, actual_named[name], rtol, atol, scale_atol)
        if name in actual_named
        else VerifyRow(name, ok=False, note="missing from candidate")
        for name, leaf in expected_named.items()
    ]
    extra = [name for name in actual_named if name not in expected_named]
    rows += [VerifyRow(name, ok=False, note="not in reference") for name in extra]
    structure = _structure_difference(expected_spec, actual_spec)
    if structure:
        rows.append(VerifyRow("(structure)", ok=False, note=structure))
    return VerifyReport(rows)


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing tensors of `dtype` (table in the module docstring)."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    if dtype in _TOLERANCES:
        return _TOLERANCES[dtype]
    return _TOLERANCES[torch.bfloat16] if dtype.is_floating_point else _EXACT


def _call(function: Callable[..., Any], inputs: Inputs) -> Any:
    """Call with a private copy of the inputs (tensors copied, containers rebuilt)."""
    args, kwargs = split_inputs(inputs)
    args, kwargs = pytree.tree_map_only(torch.Tensor, _copy, (args, kwargs))
    return function(*args, **kwargs)


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same dtype, sizes and strides: a graph that checks its inputs' layout
    sees the caller's (torch.clone makes a sliced tensor contiguous)."""
    copy = torch.empty_strided(
        tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    return copy.copy_(tensor)


def _leaf_name(path: tuple[Any, ...]) -> str:
    """A dotted name for a pytree key path: `past_key_values.0`, or `output` for the root."""
    parts = []
    for key in path:
        if isinstance(key, pytree.MappingKey):
            parts.append(str(key.key))
        elif isinstance(key, pytree.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, pytree.GetAttrKey):
            parts.append(key.name)
        else:
            parts.append(str(key))
    return ".".join(parts) or "output"


def _compare(
    name: str, expected: Any, actual: Any, rtol: float | None, atol: float | None, scale_atol: bool
) -> VerifyRow:
    """Compare one leaf: numerically for tensors, by equality for anything else."""
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
            return VerifyRow(
                name, ok=False, note=f"{type(expected).__name__} vs {type(actual).__name__}"
            )
        equal = type(expected) is type(actual) and expected == actual
        return VerifyRow(name, ok=bool(equal), note="" if equal else f"{expected!r} vs {actual!r}")
    shape = tuple(expected.shape)
    dtype = _dtype_label(expected.dtype, actual.dtype)
    if expected.shape != actual.shape:
        note = f"shape {shape} vs {tuple(actual.shape)}"
        return VerifyRow(name, ok=False, shape=shape, dtype=dtype, note=note)
    default_rtol, default_atol = _loosest(
        default_tolerance(expected.dtype), default_tolerance(actual.dtype)
    )
    rtol = default_rtol if rtol is None else rtol
    note = ""
    if atol is None or scale_atol:
        stated, magnitude = (default_atol if atol is None else atol), _magnitude(expected)
        atol = stated * magnitude
        if magnitude > 1:  # say where a tolerance larger than the stated one comes from
            note = f"atol {_number(stated)} x largest |output| {_number(magnitude)}"
    max_abs, max_rel, close = _errors(expected, actual, rtol, atol)
    return VerifyRow(
        name,
        ok=close,
        shape=shape,
        dtype=dtype,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        cosine=cosine_similarity(expected, actual),
        rtol=rtol,
        atol=atol,
        note=note,
    )


def _magnitude(reference: torch.Tensor) -> float:
    """The largest finite magnitude in a float tensor, at least 1 (scales the default atol)."""
    if not (reference.is_floating_point() or reference.is_complex()) or reference.numel() == 0:
        return 1.0
    finite = reference.detach().abs()
    finite = finite[finite.isfinite()]
    return max(1.0, float(finite.max())) if finite.numel() else 1.0


def _errors(
    expected: torch.Tensor, actual: torch.Tensor, rtol: float, atol: float
) -> tuple[float, float, bool]:
    """(max abs error, max rel error, all close), computed on the reference's device.

    Floats are compared in float64, complex in complex128 and integers / bools in int64, so
    neither side loses precision. NaNs in the same places count as equal, and so do equal
    infinities (zero error).
    """
    reference = expected.detach().to(_working_dtype(expected.dtype))
    other = actual.detach().to(device=reference.device, dtype=reference.dtype)
    close = bool(torch.isclose(other, reference, rtol=rtol, atol=atol, equal_nan=True).all())
    if reference.numel() == 0:
        return 0.0, 0.0, close
    same = (other == reference) | (other.isnan() & reference.isnan())
    difference = torch.where(same, 0.0, (other - reference).abs().to(torch.float64))
    magnitude = reference.abs().to(torch.float64)
    relative = torch.where(magnitude > 0, difference / magnitude, 0.0)
    return float(difference.max()), float(relative.max()), close


def cosine_similarity(expected: torch.Tensor, actual: torch.Tensor) -> float | None:
    """Cosine similarity of two same-shaped tensors as flat vectors; None unless floating-point.

    Computed in float64 (complex tensors as their real and imaginary parts) over the elements
    finite in both. Equal vectors give exactly 1.0 (two all-zero ones included); an all-zero
    vector against a non-zero one is unrelated (0.0).
    """
    if not (expected.is_floating_point() or expected.is_complex()):
        return None
    working = _working_dtype(expected.dtype)
    reference = expected.detach().to(working)
    other = actual.detach().to(device=reference.device, dtype=working)
    if working.is_complex:
        reference, other = torch.view_as_real(reference), torch.view_as_real(other)
    reference, other = reference.reshape(-1), other.reshape(-1)
    # A sum is finite only if every element is; the elementwise check and the selection, which
    # copies, then run only where one is not: on GPT-2's logits ([1, 128, 50257]) they took
    # 0.4 s a call, most of int8 calibration's comparisons.
    if not bool(torch.isfinite(reference.sum() + other.sum())):
        finite = reference.isfinite() & other.isfinite()
        reference, other = reference[finite], other[finite]
    if torch.equal(reference, other):
        return 1.0  # exactly, without the rounding of the division below
    norms = float(torch.dot(reference, reference)) ** 0.5 * float(torch.dot(other, other)) ** 0.5
    if norms == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float(torch.dot(reference, other)) / norms))


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else torch.int64


def _loosest(first: tuple[float, float], second: tuple[float, float]) -> tuple[float, float]:
    return max(first[0], second[0]), max(first[1], second[1])


def _dtype_label(expected: torch.dtype, actual: torch.dtype) -> str:
    name = str(expected).removeprefix("torch.")
    return name if expected == actual else f"{name} vs {str(actual).removeprefix('torch.')}"


def _structure_difference(expected: pytree.TreeSpec, actual: pytree.TreeSpec) -> str:
    """The first container whose type differs (a ModelOutput became a tuple, say); '' if none.

    Leaf names alone cannot see this: a dict and a ModelOutput with the same keys name their
    leaves alike, but callers using attribute access would break.
    """
    if expected.is_leaf() or actual.is_leaf():
        return ""
    if expected.type is not actual.type:
        return (
            f"reference returns {expected.type.__name__}, candidate returns {actual.type.__name__}"
        )
    for expected_child, actual_child in zip(expected.children(), actual.children(), strict=False):
        difference = _structure_difference(expected_child, actual_child)
        if difference:
            return difference
    return ""


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def _cosine_text(value: float | None) -> str:
    """Enough digits to tell 0.9999 from 0.999999: a cosine's interest is in its distance from 1."""
    return "" if value is None else f"{value:.6f}"
