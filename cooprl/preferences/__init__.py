"""Floor 7, preferences: pairs of completions (pairs), the comparators that judge them (comparators) and the learned
reward model (reward_model), for MADPO and MARLHF."""
