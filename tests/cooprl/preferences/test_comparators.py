"""The comparator's sampling settings (cooprl/preferences/comparators.py): each role samples as its agent does, with
the agent's own settings (an `agents:` entry), and the role's stop strings; a centralized comparator's joint budget."""

from dataclasses import replace
from types import SimpleNamespace

from cooprl.config import Run, load_config
from cooprl.preferences.comparators import build_comparator
from cooprl.rollout.generation import SamplingParams
from tests.scripted import scripted_task

HOT = SamplingParams(max_new_tokens=16, temperature=1.2, top_p=0.95, top_k=None)
COLD = SamplingParams(max_new_tokens=48, temperature=0.2, top_p=0.9, top_k=5)


def team() -> list[SimpleNamespace]:
    return [SimpleNamespace(params=params, generator=f"generator {a}") for a, params in enumerate((HOT, COLD))]


def test_each_role_of_the_live_comparator_samples_with_its_agent_s_own_settings():
    task = replace(scripted_task(), stop_strings=[("\nEND",), ()])
    comparator = build_comparator(Run.of(load_config(None, []), "madpo_iter"), task, team())
    assert comparator.generators == ["generator 0", "generator 1"]
    assert comparator.params == [replace(HOT, stop_strings=("\nEND",)), COLD]


def test_a_centralized_comparator_budget_is_the_joint_one_for_every_role():
    config = load_config(None, ["madpo_iter.comparator_generation_mode=centralized",
                                "madpo_iter.comparator_centralized_max_new_tokens=100"])
    comparator = build_comparator(Run.of(config, "madpo_iter"), scripted_task(num_agents=1), team()[:1])
    assert comparator.params == [replace(HOT, max_new_tokens=100)]
