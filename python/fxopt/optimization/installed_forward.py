"""A forward optimize_model sets on one of the model's modules, and how it gives it back."""

from __future__ import annotations

from typing import Any


class InstalledForward:
    """Base of the forwards optimize_model installs on a module instance (its blocks', its
    attention modules'): keeps the forward the module had, to give it back."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.original = module.forward  # restored by uninstall
        # A forward set on the instance (accelerate's hooks do) is put back, not deleted.
        self.instance_forward = "forward" in module.__dict__

    def uninstall(self) -> None:
        """Gives the module the forward it had before, if it still runs this one."""
        if self.module.__dict__.get("forward") is not self:
            return
        if self.instance_forward:
            self.module.__dict__["forward"] = self.original
        else:
            del self.module.__dict__["forward"]
