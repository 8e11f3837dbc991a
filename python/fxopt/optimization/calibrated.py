"""Built-in passes that choose what to do from a run on real inputs (int8 Linears, smoothing).

Such a pass takes its inputs with :meth:`CalibratedPass.calibrate_on` (``fxopt.optimize(...,
calibration=, held_out=)`` hands them to every pass of the preset that calibrates) and, with
``calibrate=True``, runs them through the graph as the passes before it left it, right before
its own forward run (``prepares``). Without inputs it changes nothing and says why: what it
would choose depends on real activations, which generated inputs do not have.

What a calibration chose is not a parameter of the pass's signature: reverse undoes every node
the pass changed, whatever it chose, so a fresh instance (a preset's) reverses a calibrated one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from torch.fx import GraphModule

from ..engine.bridge import PassReport
from ..tracing.dummy_inputs import Inputs
from .builtin import BuiltinTransformation


class CalibratedPass(BuiltinTransformation):
    """Base of the built-in passes that calibrate on real inputs when `calibrate` is set."""

    prepares = True
    calibrate: bool = False
    _calibration: Inputs | None = None
    _held_out: Sequence[Inputs] = ()

    def calibrate_on(self, calibration: Inputs, held_out: Sequence[Inputs] = ()) -> None:
        """The batch that chooses, and batches the choice must then hold on too."""
        self._calibration, self._held_out = calibration, held_out

    def prepare(self, graph_module: GraphModule) -> bool:
        if not self.calibrate:
            return True
        if self._calibration is None:
            reason = (
                "no calibration inputs: it chooses from real activations only "
                "(fxopt.optimize(..., calibration=inputs))"
            )
            self._report = PassReport(type(self).__name__, skipped=[("*", reason)])
            return False
        self.choose(graph_module, self._calibration, self._held_out)
        return True

    @abstractmethod
    def choose(self, graph_module: GraphModule, calibration: Inputs, held_out: Sequence[Inputs]) -> None:
        """Sets what the pass will do from a run of `graph_module` on `calibration`."""
