"""MARLHF / MARLHF_ITER for the code task: the generic trainer with the code task's comparator pieces
(the joint answer format of a centralized comparator, the API client), as for MADPO."""

from __future__ import annotations

from typing import Any

from cooprl.config import Config
from cooprl.task import Task


def build_marlhf(config: Config, trainer: str, task: Task) -> Any:
    """Return MARLHF / MARLHF_ITER for the code task."""
    from cooprl.trainers.marlhf import build_marlhf as build
    from envs.code_generation.comparator import api_client, code_joint_format
    return build(config, trainer, task, joint_format=code_joint_format(config.trainer(trainer)), api_client=api_client)
