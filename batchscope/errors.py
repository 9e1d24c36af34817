"""Exit codes (DESIGN.md, "Command line") and the errors that carry them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented exit codes of ``diagnose``."""

    OK = 0  # done; an OOM at the top of the sweep is a normal stop
    SOME_FAILED = 1  # some batch sizes failed for reasons other than OOM
    INTERRUPTED = 2  # Ctrl-C / SIGTERM; the partial report was written
    INTERNAL = 3  # a bug in batchscope
    USAGE = 4  # bad option or a model file that breaks the contract
    NOTHING_MEASURED = 5  # not even the smallest batch size could be measured


class BatchscopeError(Exception):
    """An error with one clear sentence for the user and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(BatchscopeError):
    """A bad option, caught before the model file is imported."""

    exit_code = ExitCode.USAGE


class ModelFileError(BatchscopeError):
    """The model file breaks the contract (DESIGN.md, "The model-file contract").

    ``detail`` holds the user's own frames of the traceback behind it, when there is one:
    the CLI prints them under the sentence."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class NothingMeasuredError(BatchscopeError):
    """Not even one batch size could be measured."""

    exit_code = ExitCode.NOTHING_MEASURED
