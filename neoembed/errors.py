"""The one error family for failures a user can act on.

Every neoembed error a user should read (a bad recipe field, a malformed row, a model that does not match an
index, a run that diverged) is a `NeoembedError` carrying a user-facing message and, where one applies, the
parameter it concerns (a CLI flag, a recipe field such as `optim.lr`, a file path). The CLI has a single
handler for the family: it prints the message without a traceback and exits with the error's `exit_code`,
2 for bad input and 1 for a run that failed.

`InputError` and `RunError` also derive from `ValueError` and `RuntimeError`, so library callers that catch
the built-in kinds keep working.
"""

from __future__ import annotations


class NeoembedError(Exception):
    """A failure with a message meant for the user and, optionally, the parameter it concerns."""

    exit_code = 1

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class InputError(NeoembedError, ValueError):
    """Bad input: a file, recipe field, flag, row or model the command cannot use. Exit code 2."""

    exit_code = 2


class RunError(NeoembedError, RuntimeError):
    """A run that started from valid input and failed (diverged, a step crashed). Exit code 1."""

    exit_code = 1
