"""The environment of a process a test starts with a clean slate (a command line, torchrun, a launcher)."""

import os
from pathlib import Path

# where the project and its libraries keep caches: a child reads the caches its test run was given (CI gives the suite
# an empty model cache of its own, to prove a new user's machine), not the ones under the home folder's defaults
CACHE_VARIABLES = ("COOPRL_CACHE", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME", "TRITON_CACHE_DIR")


def child_env(**extra: str) -> dict[str, str]:
    """Return a minimal environment for a child process: PATH, HOME, this run's cache variables, then `extra`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home())}
    env.update({name: os.environ[name] for name in CACHE_VARIABLES if name in os.environ})
    env.update(extra)
    return env
