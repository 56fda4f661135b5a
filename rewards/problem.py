"""The code problem every layer shares: the code reward scores one, environments and strategies pose one.

It lives here, below both `rewards` and `envs`, so that neither imports the other's modules for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Problem:
    """One HumanEval-format problem: an id, the prompt (signature and docstring), the test source (a
    `def check(candidate)`), and the entry point's name. `extra` keeps any other fields of the record (e.g.
    HumanEval's canonical solution, the cooperative set's reference aux and main)."""

    task_id: str
    prompt: str
    test: str
    entry_point: str
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """Return the record as a plain dict (the four fields plus the extras)."""
        return {"task_id": self.task_id, "prompt": self.prompt, "test": self.test,
                "entry_point": self.entry_point, **self.extra}

    @classmethod
    def coerce(cls, value: "Problem | Mapping[str, Any]") -> "Problem":
        """Return `value` as a Problem: a Problem as it is, a mapping with `prompt`, `test` and `entry_point`
        (`task_id` optional, other keys kept as extras) converted. For the public reward functions, which
        callers outside the library may give plain records; inside the library problems are always Problems."""
        if isinstance(value, Problem):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"a problem is a Problem or a mapping, not {type(value).__name__}")
        core = ("task_id", "prompt", "test", "entry_point")
        return cls(str(value.get("task_id", "")), value["prompt"], value["test"], value["entry_point"],
                   {k: v for k, v in value.items() if k not in core})
