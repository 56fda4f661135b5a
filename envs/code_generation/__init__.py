"""The code-generation environment: an auxiliary agent writes a helper `aux`, a main agent writes the required
function and uses it; the shared reward runs the tests in the sandbox.

Importing it registers its config sections (`dataset`, `external`) with the library's config loader.
"""

from envs.code_generation import config as _config  # noqa: F401  (registers CodeTaskConfig)
