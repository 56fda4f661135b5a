"""`python -m cooprl.parallel.torchrun ARGS`: torchrun (same arguments), with Ctrl-C and SIGTERM ending in one line.

torchrun starts its processes in sessions of their own, so Ctrl-C reaches torchrun alone: it sends the signal on to
every process, waits `--shutdown-timeout` seconds for them, kills what is left, then raises its SignalException,
which plain torchrun prints as a traceback (exit status 1). The processes stop as a single process does (a
checkpoint after the step in progress, cooprl.stopping). Here the wait is 600 s unless the command line sets it
(torchrun's 30 s killed a GPU run in the middle of its step, or of its save), and the SignalException is one line
and the exit status the signal gives a shell (130, 143). Any other outcome is torchrun's own.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Sequence

SHUTDOWN_TIMEOUT_S = 600   # a step and a checkpoint of a large model on a GPU take minutes
STARTED_HERE = "COOPRL_TORCHRUN"   # set in the environment of the processes this launcher starts


def with_shutdown_timeout(argv: Sequence[str]) -> list[str]:
    """Return torchrun's arguments `argv` with `--shutdown-timeout SHUTDOWN_TIMEOUT_S` first unless they set one."""
    given = any(a.split("=")[0] in ("--shutdown-timeout", "--shutdown_timeout") for a in argv)
    return list(argv) if given else [f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}", *argv]


def command_for(script: str, world_size: int) -> str:
    """Return the command that starts `script` as this run's `world_size` processes were started: `python SCRIPT`
    for one, else this launcher with as many processes per node (a resume needs as many), each node named."""
    if world_size <= 1:
        return f"python {script}"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or world_size)
    nodes = world_size // per_node
    on_nodes = f" (on each of the {nodes} nodes, with torchrun's rendezvous flags)" if nodes > 1 else ""
    return f"python -m cooprl.parallel.torchrun --nproc_per_node {per_node}{on_nodes} {script}"


def plain_torchrun_warning() -> str:
    """Return what a process started by plain torchrun should say at its start ("" for any other launcher): no
    training process can stop torchrun's traceback (its agent raises SignalException in its own process)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or STARTED_HERE in os.environ:
        return ""
    if "ACCELERATE_MIXED_PRECISION" in os.environ:   # accelerate launch, which catches the SignalException itself
        return ""
    return ("started by plain torchrun: after Ctrl-C or SIGTERM it kills a step or a save still running after its "
            "--shutdown-timeout (30 s unless given) and ends in its own SignalException traceback; python -m "
            "cooprl.parallel.torchrun takes the same arguments, waits for the saves and ends in one line")


def main(argv: Sequence[str] | None = None) -> int:
    """Run torchrun with `argv` (default: the command line's); return its exit status (128 + the signal's number
    when Ctrl-C or SIGTERM stopped it, said in one line)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun
    os.environ[STARTED_HERE] = "1"
    try:
        torchrun(with_shutdown_timeout(sys.argv[1:] if argv is None else argv))
    except SignalException as stop:
        said = "interrupted (Ctrl-C)" if stop.sigval == signal.SIGINT else f"terminated ({stop.sigval.name})"
        print(f"{said}: each process stopped as one process stops (a checkpoint after its step); rank 0's log above "
              "says what was kept and how to continue", file=sys.stderr)
        return 128 + int(stop.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
