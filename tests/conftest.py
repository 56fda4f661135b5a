"""Test set-up shared by every test file."""

# The code task's config sections (dataset, external) are registered when its environment is imported, as the
# train_*.py scripts do; tests that load configs directly through cooprl.config need them too.
import envs.code_generation  # noqa: F401
