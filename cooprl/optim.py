"""The one guarded optimizer step every update in the library takes (policy gradient, DPO, critics, reward model)."""

from __future__ import annotations

from cooprl.engine import guarded_step  # noqa: F401  (the step lives with the update engine that takes it)
