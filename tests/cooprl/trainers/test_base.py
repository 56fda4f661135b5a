"""What every team algorithm shares (cooprl.trainers.base): one meaning of an agent's metrics in every trainer."""

import pytest

import cooprl.trainers.actor_critic as actor_critic
import cooprl.trainers.base as base
import cooprl.trainers.magrpo as magrpo
from cooprl.config import Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.trainers.loop import seed_everything
from tests.scripted import scripted_task

pytestmark = pytest.mark.slow

# one agent, G=2, 2 turns, one node (magrpo: 2 samples) or one turn sample (iac) per optimizer step: several steps in
# one update, with losses that differ
SETTINGS = {
    "magrpo": (magrpo.build_magrpo, ["magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=3",
                                     "magrpo.train_batch_size=1", "magrpo.advantage_mode=raw",
                                     "magrpo.advantage_normalization=false"], 2),
    "iac": (actor_critic.build_iac, ["iac.update_schedule=turns", "iac.rollout_buffer_size=4",
                                      "iac.train_batch_size=1", "iac.advantage_normalization=false"], 1),
}


@pytest.mark.parametrize("trainer", sorted(SETTINGS))
def test_an_agents_loss_is_the_mean_over_its_optimizer_steps_in_every_trainer(trainer, monkeypatch):
    build, overrides, samples_per_step = SETTINGS[trainer]
    losses = []
    original = base.policy_gradient_metrics   # every trainer's policy step (TeamAlgorithm.policy_step) reads it

    def recorded(*args, **kwargs):
        metrics = original(*args, **kwargs)
        losses.append(metrics["loss"])
        return metrics
    monkeypatch.setattr(base, "policy_gradient_metrics", recorded)
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "wandb.mode=disabled",
                                f"{trainer}.max_new_tokens=4", f"{trainer}.num_generations=2", f"{trainer}.num_turns=2",
                                f"{trainer}.early_termination_threshold=null", *overrides])
    seed_everything(config.seed)
    algorithm = build(Run.of(config, trainer), scripted_task(num_agents=1))
    metrics = algorithm.train_step(algorithm.task.train_items[0], 1)
    assert len(losses) >= 3 and len(set(losses)) > 1   # several steps, not all alike: the last is not the mean
    assert metrics["agent_0/loss"] == pytest.approx(sum(losses) / len(losses))
    assert metrics["agent_0/trained_samples"] == samples_per_step * len(losses)   # a count adds up over the steps
