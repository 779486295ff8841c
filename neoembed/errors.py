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

import errno
import shutil
from pathlib import Path


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


# System errors about the path a user gave (a place below a file, one that cannot be written, a full disk):
# bad input, exit 2. Any other (a network error, an I/O error) is a failed run, exit 1.
_PATH_ERRNOS = {
    errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EEXIST, errno.ELOOP,
    errno.EROFS, errno.ENAMETOOLONG, errno.ENOSPC, errno.EDQUOT,
}  # fmt: skip


def from_os_error(error: OSError) -> NeoembedError:
    """A system error as one line: the path, the system's reason and, for a full disk, the space left."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT) and error.filename is not None:
        reason += f" ({free_space(error.filename)} free there)"
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    message = f"{' -> '.join(paths)}: {reason}" if paths else reason
    return InputError(message) if error.errno in _PATH_ERRNOS else RunError(message)


def naming(error: OSError, path: str | Path) -> OSError:
    """`error`, or the same error naming `path` where it names no file (a failed write names none), so its
    one-line message says where."""
    if error.filename is not None or error.errno is None:
        return error
    return OSError(error.errno, error.strerror, str(path))


def free_space(path: str | Path) -> str:
    """The free space on the file system that holds `path` (or its nearest existing parent), readable."""
    place = Path(path)
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        free = shutil.disk_usage(place).free
    except OSError:
        return "unknown space"
    return f"{free / 2**20:,.1f} MiB" if free < 2**30 else f"{free / 2**30:,.1f} GiB"
