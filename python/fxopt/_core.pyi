"""fxopt's C++ engine"""

from collections.abc import Callable, Iterable, Sequence, Set
import enum
from typing import Any, overload

import torch
import torch.fx
import torch.fx.node
import torch.nn


class PassError(RuntimeError):
    pass

class TensorInfo:
    @overload
    def __init__(self) -> None: ...

    @overload
    def __init__(self, shape: Sequence[int], dtype: str, device: str, requires_grad: bool, is_parameter: bool, handle: int) -> None: ...

    @property
    def shape(self) -> list[int]: ...

    @shape.setter
    def shape(self, arg: Sequence[int], /) -> None: ...

    @property
    def dtype(self) -> str: ...

    @dtype.setter
    def dtype(self, arg: str, /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def requires_grad(self) -> bool: ...

    @requires_grad.setter
    def requires_grad(self, arg: bool, /) -> None: ...

    @property
    def is_parameter(self) -> bool: ...

    @is_parameter.setter
    def is_parameter(self, arg: bool, /) -> None: ...

    @property
    def handle(self) -> int: ...

    @handle.setter
    def handle(self, arg: int, /) -> None: ...

class Skip:
    @property
    def node(self) -> str: ...

    @property
    def reason(self) -> str: ...

    def __repr__(self) -> str: ...

class PassResult:
    @property
    def changed(self) -> list[str]: ...

    @property
    def skipped(self) -> list[Skip]: ...

class EditKind(enum.Enum):
    """What an edit does; the fields it uses follow each name."""

    CreateNode = 0
    """node, anchor, op, target, name, args, kwargs"""

    SetInputs = 1
    """node, args, kwargs"""

    SetTarget = 2
    """node, op, target"""

    SetMeta = 3
    """node, key, value"""

    EraseMeta = 4
    """node, key"""

    EraseNode = 5
    """node"""

    MoveNode = 6
    """node, anchor"""

    SetModule = 7
    """path, like, module_type, attributes, tensors"""

    RemoveModule = 8
    """path"""

    SetAttribute = 9
    """path, tensor"""

    RemoveAttribute = 10
    """path"""

class Edit:
    """One edit of the log; its fields are read as Python values."""

    @property
    def kind(self) -> EditKind: ...

    @property
    def node(self) -> int:
        """the edited node's id"""

    @property
    def anchor(self) -> int:
        """id of the node a created or moved node goes before"""

    @property
    def op(self) -> str: ...

    @property
    def target(self, /) -> Callable[..., Any] | str: ...

    @property
    def name(self) -> str:
        """a created node's name"""

    @property
    def args(self, /) -> tuple[Any, ...]: ...

    @property
    def kwargs(self, /) -> dict[str, Any]: ...

    @property
    def key(self) -> str:
        """a metadata key"""

    @property
    def value(self, /) -> Any: ...

    @property
    def path(self) -> str:
        """a module or tensor path"""

    @property
    def like(self) -> str:
        """path of the module a SetModule copies"""

    @property
    def module_type(self) -> str:
        """qualified class name of a SetModule's module"""

    @property
    def attributes(self, /) -> dict[str, Any]: ...

    @property
    def tensors(self, /) -> dict[str, TensorInfo | None]: ...

    @property
    def tensor(self, /) -> TensorInfo | None: ...

class TensorTable:
    """The tensors a session refers to by handle (bindings/tensor_table.h)."""

    def __init__(self, tensor_type: object, parameter_type: object) -> None: ...

    def add(self, tensor: torch.Tensor) -> TensorInfo: ...

    def tensor(self, handle: int) -> torch.Tensor: ...

    def rebind(self, handle: int, tensor: torch.Tensor) -> None: ...

    def retain(self, live: Iterable[object]) -> None: ...

    def __len__(self) -> int: ...

class Session:
    def __init__(self, node_type: object, tensor_type: object, size_type: object, strided: object, qualname: object, resolve: object) -> None: ...

    def import_graph(self, root: object) -> tuple[list[str], list[str]]: ...

    def matches(self, root: object) -> bool: ...

    def snapshot(self, root: object) -> None: ...

    def snapshot_modules(self, root: object, imported: Set[str], attributes: Sequence[str], paths: Sequence[str], module_type: object) -> None: ...

    def modules_match(self, root: object) -> bool: ...

    def module_tensors(self) -> list: ...

    def import_modules(self, modules: Iterable[tuple[str, torch.nn.Module]], attributes: Sequence[str], tensors: TensorTable) -> None: ...

    def add_attribute(self, path: str, tensor: TensorInfo) -> None: ...

    def add_taken_paths(self, paths: object) -> None: ...

    def reserve_names(self, names: object) -> None: ...

    def run(self, name: str, options: dict, signature: str, reverse: bool, tensor_ops: object) -> PassResult: ...

    def edit_count(self) -> int: ...

    def effective_edits(self) -> tuple[list[int], list[int]]: ...

    def write_meta(self, indices: Sequence[int]) -> None: ...

    def applied_marks(self) -> list[str]: ...

    def edit(self, index: int) -> Edit: ...

    def clear_edits(self) -> None: ...

    def bind(self, id: int, fx_node: object) -> None: ...

    def py_node(self, id: int) -> torch.fx.node.Node: ...

    def node_ids(self) -> list[int]: ...

    def node(self, id: int) -> tuple: ...

    def lint(self) -> list: ...

    def python_source(self, root: object, illegal_names: Sequence[str], custom_builtins: Sequence[str], output_prefix: str, output_suffix: str, opaque_source: object, call_target: object, type_source: object, prologue: object) -> tuple[str, list, list[str], dict, int] | None: ...

    def __len__(self) -> int: ...

class PassInfo:
    """A built-in pass as registered in passes/registry.cc."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def preserves_computation(self) -> bool: ...

def fx_graph_lints_clean(graph: torch.fx.Graph, module_type: type) -> bool:
    """
    True if graph.lint() would pass, proved in one native walk (bindings/fx_lint.h).
    """

def passes() -> list[PassInfo]:
    """The registry, in its order."""
