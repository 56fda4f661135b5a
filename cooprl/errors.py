"""The one base class of user errors: a bad config, file, dataset, model name or checkpoint.

The command lines (`cooprl.cli.exit_status` under every train_*.py, `evaluate.py`) print a `UserError` as one `error:
...` line and exit with status 2, without a traceback; anything else is a bug and keeps its traceback. Every module
defines its own subclass (ConfigError, DatasetError, ModelError, CheckpointError, ...), so catching `UserError` needs
no registry and does not depend on which modules were imported first. """

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input; the message is meant to be shown as is (it names the file or key)."""
