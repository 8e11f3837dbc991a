"""A GraphModule's forward compiled to read each module on its get_attr paths once.

fx prints a get_attr node as the whole attribute path from the root module
(``getattr(self.mobilenet_v2.layer, "0").expand_1x1.convolution.weight``), and every step of it
through a submodule is a call of ``nn.Module.__getattr__``, a Python function: an optimized
MobileNetV2 reads 106 tensors that way, 618 such calls a forward, 0.44 ms of its 6.5 (one core
of a Zen 4). Here each get_attr line reads its tensor from a local that holds its module, made
the first time a line needs it, on that line: MobileNetV2's 106 tensors then cost 124 module
reads and 106 tensor reads. Same graphs, interleaved rounds (docs/benchmarks.md, stop 43):
MobileNetV2 `fast` 0.95x the time a forward, the real MiniLM `fast` + calibration 0.96x.

Only the lines fx prints for get_attr nodes (alone or followed by the names fx frees there: a
read no node uses, the weight a fused call replaced kept for reverse, is freed on its own line;
MobileNetV2 `fast` + calibration: 447 -> 294 calls a forward, 5.49 -> 5.10 ms, medians of 30
interleaved rounds), and the callee of those it prints for call_module nodes (symbolic traces
call their modules), change, each into statements on the same line (the
line numbers fx maps back to nodes stay right); the paths are walked in the same order as
before, once per forward instead of once per tensor, so a forward that replaced a submodule
halfway through would read the old one: no graph traced from a model does. `gm.code` stays the
source fx prints for the graph (what reverse, saving and comparisons of graphs read); the forward
is compiled from the rewritten source under the same line numbers, which tracebacks show. A deep
copy (torch's recompile in `GraphModule.__init__`) compiles the plain source, then the copy's
forward is compiled again this way (`_deepcopy_reading_modules_once`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.fx import Graph, GraphModule
from torch.fx.graph import PythonCode

try:  # how GraphModule.recompile compiles its forward (its source cached for tracebacks)
    from torch.fx.graph_module import _forward_from_src
except ImportError:  # a torch without it: forwards stay as torch compiles them
    _forward_from_src = None  # type: ignore[assignment]

_INDENT = "    "
_FREED = ";  "  # fx's separator before the names a line frees (`x = None`)


def _attribute(base: str, name: str) -> str:
    # As fx's own _format_target spells one step of a path.
    return f"{base}.{name}" if name.isidentifier() else f'getattr({base}, "{name}")'


def _path_source(target: str) -> str:
    source = "self"
    for name in target.split("."):
        source = _attribute(source, name)
    return source


class _ModuleLocals:
    """Locals holding the modules on the paths read so far, by path."""

    def __init__(self, taken: set[str]) -> None:
        self._locals: dict[str, str] = {}
        self._taken = taken

    def local(self, path: str, statements: list[str]) -> str:
        """The local holding the module at `path`, appending to `statements` the assignments
        that make it (and its parents) where none does yet."""
        if not path:
            return "self"
        found = self._locals.get(path)
        if found is not None:
            return found
        parent, _, name = path.rpartition(".")
        base = self.local(parent, statements)
        local = self._fresh()
        statements.append(f"{local} = {_attribute(base, name)}")
        self._locals[path] = local
        return local

    def _fresh(self) -> str:
        index = len(self._locals)
        while f"_module_{index}" in self._taken:
            index += 1
        name = f"_module_{index}"
        self._taken.add(name)
        return name


def _rest_of_line(line: str, read: str, op: str) -> str | None:
    """What follows `read` on `line` where it is the line fx prints for the node: nothing or the
    names fx frees after a get_attr (one no node reads is freed on its own line: a weight a fused
    call replaced, kept for reverse), a call_module's arguments; None for any other line."""
    if not line.startswith(read):
        return None
    rest = line[len(read) :]
    if op == "get_attr":
        return rest if rest == "" or rest.startswith(_FREED) else None
    return rest if rest.startswith("(") else None


def read_modules_once(code: PythonCode, graph: Graph) -> PythonCode:
    """`code` (the forward fx or the engine generated for `graph`) with its get_attr lines, and
    its call_module lines' callees, read through module locals. Lines not printed as fx prints
    them are left as they are."""
    lines = code.src.split("\n")
    assigned = {  # the line assigning each name first
        line[len(_INDENT) : line.find(" = ")]: index
        for index, line in reversed(list(enumerate(lines)))
        if line.startswith(_INDENT) and " = " in line
    }
    modules = _ModuleLocals({node.name for node in graph.nodes} | set(code.globals))
    changed = False
    for node in graph.nodes:
        if node.op not in ("get_attr", "call_module") or not isinstance(node.target, str) or "." not in node.target:
            continue
        read = f"{_INDENT}{node.name} = {_path_source(node.target)}"
        index = assigned.get(node.name)
        if index is None:
            continue
        rest = _rest_of_line(lines[index], read, node.op)
        if rest is None:
            continue
        parent, _, name = node.target.rpartition(".")
        statements: list[str] = []
        module = modules.local(parent, statements)
        statements.append(f"{node.name} = {_attribute(module, name)}{rest}")
        lines[index] = _INDENT + "; ".join(statements)
        changed = True
    if not changed:
        return code
    return dataclasses.replace(code, src="\n".join(lines))


def compile_reading_modules_once(gm: GraphModule, code: PythonCode) -> bool:
    """After ``gm.recompile()`` compiled `code` (fx's source for gm's graph): gm's forward
    compiled again from it with the module reads above. False where nothing changed."""
    rewritten = read_modules_once(code, gm.graph)
    if rewritten is code or _forward_from_src is None:
        return False
    co_fields: dict[str, Any] = getattr(gm.graph, "_co_fields", {})
    # Each GraphModule has a class of its own (GraphModule.__new__), so these reach gm only.
    type(gm).forward = _forward_from_src(rewritten.src, rewritten.globals, co_fields)
    type(gm).__deepcopy__ = _deepcopy_reading_modules_once  # type: ignore[method-assign, assignment]
    return True


def _deepcopy_reading_modules_once(gm: GraphModule, memo: dict[int, Any]) -> GraphModule:
    """GraphModule's deep copy, whose forward reads each module once too: torch's copy runs
    GraphModule.__init__, which compiles fx's plain source (MobileNetV2 `fast` + calibration:
    a copy.deepcopy ran 5.89 ms a forward against 5.31, medians of 30 interleaved rounds)."""
    copied = GraphModule.__deepcopy__(gm, memo)
    compile_reading_modules_once(copied, copied.graph.python_code(root_module="self"))
    return copied
