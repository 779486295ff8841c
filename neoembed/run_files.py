"""Run files: every JSON, text or parquet file a run, build or index writes, every JSONL log, and the lock
that keeps a second writer out of an output directory.

Writes are atomic (a killed process leaves the old file or the new one, never half of one), so a resumed
job can trust what it finds. Nothing here imports transformers: writing a file must stay cheap.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from neoembed.errors import InputError, naming

METRICS_FILE = "metrics.jsonl"


class OutputLocked(InputError):
    """Another process is writing the same output directory; the message names it."""


def temp_path(path: Path) -> Path:
    """A sibling name unique to this writer: ranks on other machines may write the same file at once."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextmanager
def atomic_write(path: Path, suffix: str = "") -> Iterator[Path]:
    """The temporary sibling to write `path` through: renamed to `path` when the block ends, removed when it
    raises, so a full disk or a crash leaves no partial file. An OSError that names no file (a failed write
    names none) is raised again naming `path`, so its one-line error says where. `suffix` is for writers
    that choose the format by the file's extension."""
    path = Path(path)
    tmp = temp_path(path)
    tmp = tmp.with_name(tmp.name + suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and (named := naming(err, path)) is not err:
            raise named from err
        raise


def write_text(path: Path, text: str) -> None:
    """Write `text` atomically (through a sibling temporary file and a rename)."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write `data` atomically as indented JSON with sorted keys (the same data gives the same bytes)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_parquet(path: Path, table, row_group_size: int = 10_000) -> None:
    """Write a pyarrow Table atomically as zstd-compressed parquet."""
    import pyarrow.parquet as pq

    with atomic_write(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)


def append_jsonl(path: Path, record: dict) -> None:
    """Append `record` as one JSON line: what every neoembed log file (metrics, build and index logs) holds."""
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSONL log, in order (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


@contextmanager
def one_writer(
    directory: Path, name: str = "writer", param: str | None = None, create: bool = True, wait: bool = False
) -> Iterator[None]:
    """Hold `directory`'s one-writer lock while the body runs; a second writer gets `OutputLocked` at once,
    naming the process that holds it, before it writes anything (with `wait`: it waits its turn, for writers
    that would write the same thing, so the next one finds the work done).

    The lock is filelock's OS lock (flock) on `<directory>/.<name>.lock`: the kernel releases it when its
    holder exits, however it exits, so a killed writer leaves no stale lock and a re-run resumes. Beside it,
    `.<name>.lock.holder` says who holds it (pid, host, command, start), for the second writer's message.
    With `create` False the directory must exist already."""
    from filelock import FileLock, Timeout

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(
            f"{directory} is a file, not a directory; choose a directory to write to", param=param
        )
    if not create and not directory.is_dir():
        raise InputError(f"{directory} does not exist", param=param)
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / f".{name}.lock"
    holder = lock_path.with_name(lock_path.name + ".holder")
    lock = FileLock(lock_path, timeout=-1 if wait else 0)
    try:
        lock.acquire()
    except Timeout:
        raise OutputLocked(
            f"{directory} is being written by {_describe_holder(holder)}; wait for it to finish, or stop it "
            "(a re-run resumes), or choose another output directory",
            param=param,
        ) from None
    try:
        write_json(
            holder,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": " ".join(sys.argv),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
        )
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


def _describe_holder(holder: Path) -> str:
    try:
        who = json.loads(holder.read_text())
        return f"process {who['pid']} on {who['host']} (`{who['command']}`, since {who['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not said which yet)"


def is_lock_file(path: Path) -> bool:
    """Whether `path` is one of `one_writer`'s own files (which do not make a directory non-empty)."""
    return path.name.startswith(".") and path.name.endswith((".lock", ".lock.holder"))


def file_checksum(path: Path, size: int | None = None, chunk_bytes: int = 8 << 20) -> str:
    """xxh3-128 of a file's bytes (its first `size` bytes, if given), read in chunks: fast enough (several
    GB/s) to verify large index files."""
    import xxhash

    digest = xxhash.xxh3_128()
    left = float("inf") if size is None else size
    with Path(path).open("rb") as file:
        while left > 0 and (chunk := file.read(int(min(chunk_bytes, left)))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()
