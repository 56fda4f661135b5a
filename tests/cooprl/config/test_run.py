"""Run.of: the run a trainer trains, and the run of MARLHF's RL algorithm."""

from cooprl.config import Run, load_config


def test_marlhf_iter_counts_its_refresh_iterations_and_its_magrpo_takes_one_pass():
    # num_iterations is MARLHF_ITER's refresh count and MAGRPO's passes (TRL's name): the RL step must not read 4
    # refresh iterations as 4 clipped passes
    run = Run.of(load_config(None, ["marlhf_iter.num_iterations=4", "marlhf_iter.rl_algorithm=marloo"]), "marlhf_iter")
    assert run.section.num_iterations == 4
    assert run.rl.section.num_iterations == 1 and run.rl.section.advantage_mode == "rloo"
    # plain MARLHF has no refresh iterations: its MAGRPO takes the passes it is given
    run = Run.of(load_config(None, ["marlhf.num_iterations=2"]), "marlhf")
    assert run.rl.section.num_iterations == 2
