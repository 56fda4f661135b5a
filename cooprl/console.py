"""What every command line does before it works: how many torch threads it uses, what it prints, where the details go.

- Torch threads: `--torch-threads N`, else `OMP_NUM_THREADS` when set, else half the CPUs this process may use, at
  most 4. torch's own default (every core) oversubscribes a busy machine: the reward's worker processes run programs
  on the same cores while the model samples (the rollout pipelines them), and OpenMP threads spin while they wait for a
  core. On a busy 2-core machine a 4-problem evaluation took about 8 minutes with torch's default, about 30 s with
  one thread.
- Quiet by default: transformers' "Loading weights" bars and its deprecation warnings are switched off, and the
  project's debug details (the reward's whole isolation report, say) are kept at debug level. Training writes every
  record of the project's loggers, debug included, to `RUN_DIR/train.log` (`open_run_log`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

MAX_DEFAULT_THREADS = 4
THREADS_ENV = "OMP_NUM_THREADS"
PROJECT_LOGGERS = ("cooprl", "envs", "rewards", "strategies")   # whose debug records go to the run's log file
RUN_LOG = "train.log"


@dataclass(frozen=True)
class Threads:
    """How many torch threads a command line uses, and who chose the number (for its start-up lines)."""

    count: int
    source: str

    def describe(self) -> str:
        """Return e.g. `torch threads: 1 (default: half of 2 CPUs, at most 4; --torch-threads N)`."""
        return f"torch threads: {self.count} ({self.source})"


_chosen: Threads | None = None


def available_cpus() -> int:
    """Return the number of CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        return os.cpu_count() or 1


def default_torch_threads(cpus: int) -> int:
    """Return the default number of torch threads on `cpus` CPUs: half of them (the other half is the reward's
    worker processes' and the system's), at least 1, at most MAX_DEFAULT_THREADS."""
    return max(1, min(MAX_DEFAULT_THREADS, cpus // 2))


def positive_int(text: str) -> int:
    """argparse type of --torch-threads: return a whole number >= 1, else an argparse error naming the value."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads >= 1, got {text!r}")
    return int(text)


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """Add --torch-threads to a command line's parser."""
    parser.add_argument("--torch-threads", type=positive_int, metavar="N",
                        help=f"torch CPU threads (default: {THREADS_ENV} when set, else half the CPUs, at most "
                             f"{MAX_DEFAULT_THREADS}; more threads than free cores slow sampling down a lot)")


def choose_torch_threads(requested: int | None, environ: dict[str, str] | None = None,
                         cpus: int | None = None) -> Threads:
    """Return the torch threads of a command line: `requested` (--torch-threads), else OMP_NUM_THREADS when it holds
    a number >= 1, else `default_torch_threads` of the CPUs this process may use."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        return Threads(requested, "--torch-threads")
    value = environ.get(THREADS_ENV, "").strip()
    if value.isdigit() and int(value) >= 1:
        return Threads(int(value), f"{THREADS_ENV}={value}; --torch-threads N to change")
    cpus = available_cpus() if cpus is None else cpus
    return Threads(default_torch_threads(cpus), f"default: half of {cpus} CPU(s), at most {MAX_DEFAULT_THREADS}; "
                                                "--torch-threads N to change")


def use_torch_threads(requested: int | None) -> Threads:
    """Choose the torch threads (`choose_torch_threads`) and set them: in OMP_NUM_THREADS for a torch imported later
    (the environment is read when OpenMP starts), and in torch when it is already imported; return the choice."""
    global _chosen
    threads = choose_torch_threads(requested)
    os.environ[THREADS_ENV] = str(threads.count)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads.count)
    _chosen = threads
    return threads


def chosen_threads() -> Threads | None:
    """Return the torch threads the command line chose (None when no command line chose: a library caller)."""
    return _chosen


def quiet_libraries() -> None:
    """Switch off what the libraries print on every run without being asked: transformers' and the hub's progress
    bars ("Loading weights", one per model), transformers' advisory and deprecation warnings. Set in the environment
    (read when they are imported) and, where already imported, in the libraries themselves."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for library in ("transformers", "peft", "accelerate", "torch"):
        # deprecation notices of the libraries' own internals (`is_gradient_checkpointing` ...): nothing a user of
        # the project can act on
        warnings.filterwarnings("ignore", category=FutureWarning, module=rf"{library}(\.|$)")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=rf"{library}(\.|$)")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)   # "generated new fontManager", once per machine
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()


class RunLog(logging.Handler):
    """Writes the project's records, debug included, to the run folder's log file; records emitted before the run
    folder is known (the reward's start, the models' loading) are kept and written when it opens."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._waiting: list[logging.LogRecord] = []
        self._file = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is None:
            if len(self._waiting) < 10_000:   # a run folder that never opens (evaluate.py) keeps a bounded list
                self._waiting.append(record)
            return
        try:
            self._file.write(self.format(record) + "\n")
            self._file.flush()
        except (OSError, ValueError):   # a full disk or a closed file must not stop a run
            self.handleError(record)

    def open(self, path: Path) -> None:
        """Write the kept records and every later one to `path` (appended: a resumed run continues its log)."""
        self.close_file()
        self._file = path.open("a", encoding="utf-8")
        waiting, self._waiting = self._waiting, []
        for record in waiting:
            self.emit(record)

    def close_file(self) -> None:
        """Close the log file (the records that follow are kept again)."""
        if self._file is not None:
            self._file.close()
            self._file = None


_run_log: RunLog | None = None


def setup_logging(level: int = logging.INFO) -> None:
    """Print the project's records of `level` and above on stderr (one line each, with the time; as
    logging.basicConfig, only when nobody installed a handler before: a test's capture keeps its own), keep their
    debug records for the run's log file (`open_run_log`), and quiet the libraries (`quiet_libraries`)."""
    global _run_log
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            datefmt="%H:%M:%S")
        root.handlers[0].setLevel(level)   # the project's loggers pass debug records on: the console shows `level` up
    if _run_log is None:
        _run_log = RunLog()
        for name in PROJECT_LOGGERS:
            logger = logging.getLogger(name)
            logger.setLevel(logging.DEBUG)
            logger.addHandler(_run_log)
    quiet_libraries()


def open_run_log(run_dir: Path) -> Path | None:
    """Write the project's log records, debug included, to `run_dir`/train.log from now on (and those kept since the
    command line started); return the file's path, or None when no command line set up logging (a library caller)."""
    if _run_log is None:
        return None
    path = Path(run_dir) / RUN_LOG
    _run_log.open(path)
    return path


def close_run_log() -> None:
    """Stop writing to the run's log file (the run ended)."""
    if _run_log is not None:
        _run_log.close_file()
