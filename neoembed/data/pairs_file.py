"""Your own pairs, read from a file as typed: a build's source (`neoembed build-data --from F`, `neoembed
contrastive --data.path F`) and a test set (`neoembed mteb-eval -t F`).

What is read:
- `.jsonl` (an object a line), `.json` (an array of objects, or an object a line), `.csv` and `.tsv` (a
  header row, then a pair a row), `.parquet`; a folder of such files (read in name order); or a `datasets`
  `save_to_disk` folder (its `train` split where it holds several);
- columns as sentence-transformers names them (`anchor`, `positive`, `negative`, `negative_1`, ...) or as a
  build writes them (`query`, `positive`, `negatives`, a list), or mapped (`ColumnMap`:
  `query=question,positive=answer`).

Rows stream in batches, so a file of any size is read in bounded memory (a `.json` array is parsed whole: use
JSON lines for big files). A line that is not JSON, a CSV row whose fields do not match the header, or bytes
that are not UTF-8 stop the read with one line naming the file and line (`PairsFileError`); a row without a
mapped column is counted and skipped (`MISSING`), as are empty texts, by the build that reads it.

The held-out rule (`is_held_out`): one anchor in ten, chosen by its text key, is kept out of every build of a
pairs file and is the test split `mteb-eval -t F` scores, so the same file trains and tests without overlap.

Hand-written rather than `datasets.load_dataset("json" | "csv")`: that converts the whole file into an Arrow
cache before the first row, and reports a bad line as a parser error without its line number.
"""

from __future__ import annotations

import csv
import functools
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator

from neoembed.data.normalize import clean
from neoembed.errors import InputError
from neoembed.run_files import file_checksum

SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
ROLES = ("query", "positive", "negatives")
# Column names found without a mapping, per role, in the order tried: sentence-transformers' first.
KNOWN_NAMES = {"query": ("anchor", "query"), "positive": ("positive",)}
HOLDOUT_EVERY = 10  # one anchor in this many is the test split
BUILD_MARKERS = (
    "stats.json",
    "build.jsonl",
    "staging",
)  # a build's folder, finished or not, is no pairs file
BATCH_ROWS = 10_000
_NEGATIVE_N = re.compile(r"negative_(\d+)$")


class PairsFileError(InputError):
    """A pairs file that cannot be read: the message names the file, the line and what to do."""


class _Missing:
    """A row's value for a column the row does not have (a JSON line without the key)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def parse_column_map(value: Any) -> dict[str, tuple[str, ...]]:
    """`"query=question,positive=answer,negatives=wrong"` (a role may repeat: several negative columns), a
    list of `ROLE=COLUMN` items, or a mapping {role: column or [columns]} -> {role: (columns, ...)}."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    items: list[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = [(role, col) for role, cols in value.items() for col in _as_list(cols)]
    elif isinstance(value, list | tuple):
        items = []
        for item in value:
            role, sep, column = str(item).partition("=")
            if not sep or not role.strip() or not column.strip():
                raise ValueError(f"expected ROLE=COLUMN (e.g. query=question), got {item!r}")
            items.append((role.strip(), column.strip()))
    else:
        raise ValueError(f"expected ROLE=COLUMN,... or a mapping, got {value!r}")
    mapped: dict[str, tuple[str, ...]] = {}
    for role, column in items:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}: map {', '.join(ROLES)}")
        if role != "negatives" and role in mapped:
            raise ValueError(f"{role} mapped twice; only negatives takes several columns")
        mapped[role] = (*mapped.get(role, ()), str(column))
    return mapped


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


# {role: columns}: a settings field that reads `query=question,positive=answer` from the command line.
ColumnMap = Annotated[dict[str, tuple[str, ...]], BeforeValidator(parse_column_map)]


def is_held_out(query_key: int) -> bool:
    """Whether a pair whose anchor has this text key belongs to the test split: one anchor in `HOLDOUT_EVERY`.
    By key, so every row of an anchor falls on one side, whatever file or order it comes in."""
    return query_key % HOLDOUT_EVERY == 0


@dataclass(frozen=True)
class Batch:
    """Up to `BATCH_ROWS` rows of one file: each column's values (`MISSING` where a row lacks the column), and
    each row's line (its row number in a parquet or Arrow file), for messages that point at it."""

    columns: dict[str, list]
    lines: list[int]
    file: Path | None  # None: a dataset's rows, numbered from 0

    def where(self, offset: int) -> str:
        """`FILE:LINE` (a parquet or Arrow file's row number for its line), or `row N` of a dataset."""
        if self.file is None:
            return f"row {self.lines[offset]}"
        return f"{self.file.name}:{self.lines[offset]}"

    def __len__(self) -> int:
        return len(self.lines)


def set_name(path: Path | str) -> str:
    """What your file or folder is called in a build, a task or a table: its stem (a folder's name, `.` the
    working folder's), in letters, digits, - and _."""
    path = Path(path)
    stem = path.resolve().name if path.is_dir() else path.stem
    return re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-") or "pairs"


def is_pairs_path(path: Path | str) -> bool:
    """Whether `path` is something `open_pairs` reads (a data file, a folder of them, a saved dataset) rather
    than a build's folder, finished or not (`BUILD_MARKERS`), or nothing."""
    path = Path(path)
    if path.is_file():
        return path.suffix.lower() in SUFFIXES
    if not path.is_dir() or any((path / marker).exists() for marker in BUILD_MARKERS):
        return False
    return _is_saved_dataset(path) or any(_data_files(path))


@dataclass(frozen=True)
class PairsFile:
    """A pairs file opened: its data files, the columns found, and which of them hold each role."""

    path: Path
    files: tuple[Path, ...]  # in read order; a save_to_disk folder is one entry
    columns: tuple[str, ...]  # found in the first file
    mapping: dict[str, tuple[str, ...]]  # role -> columns

    @property
    def name(self) -> str:
        """The source name a build gives it (`set_name`)."""
        return set_name(self.path)

    @cached_property
    def digest(self) -> str:
        """Changes with any byte of the data or with the mapping: the build's identity of the source."""
        parts = []
        for file in self.files:
            for part in sorted(file.rglob("*")) if file.is_dir() else [file]:
                if part.is_file():
                    stat = part.stat()
                    parts.append(
                        (str(part.relative_to(file.parent)), str(part), stat.st_size, stat.st_mtime_ns)
                    )
        return _digest(json.dumps(self.mapping, sort_keys=True), tuple(parts))

    def batches(self, size: int = BATCH_ROWS) -> Iterator[Batch]:
        """Every row of every file, `size` rows at a time, as the roles' columns: `query`, `positive` and,
        where the file has negatives, `negatives` (each row's list, from every negative column in order)."""
        (query,), (positive,) = self.mapping["query"], self.mapping["positive"]
        negatives = self.mapping.get("negatives", ())
        wanted = [query, positive, *negatives]
        for file in self.files:
            for batch in _READERS[_kind(file)](file, wanted, size):
                columns = {"query": batch.columns[query], "positive": batch.columns[positive]}
                if negatives:
                    columns["negatives"] = [
                        [text for value in row for text in _as_list(value) if value is not MISSING]
                        for row in zip(*(batch.columns[c] for c in negatives), strict=True)
                    ]
                yield Batch(columns, batch.lines, batch.file)

    def texts(self) -> Iterator[tuple[str, str]]:
        """(query, positive) of every row holding both, cleaned: what a test split is made from."""
        for batch in self.batches():
            for query, positive in zip(batch.columns["query"], batch.columns["positive"], strict=True):
                if isinstance(query, str) and isinstance(positive, str):
                    yield clean(query), clean(positive)


def read_rows(file: Path) -> Iterator[tuple[str, dict]]:
    """(where, {column: value}) of every row of one data file, any format `open_pairs` reads."""
    for batch in _READERS[_kind(file)](file, None, BATCH_ROWS):
        names = list(batch.columns)
        for offset, values in enumerate(zip(*batch.columns.values(), strict=True)):
            yield batch.where(offset), dict(zip(names, values, strict=True))


@functools.lru_cache(maxsize=32)
def _digest(mapping: str, parts: tuple[tuple[str, str, int, int], ...]) -> str:
    """xxh3 of the mapping and each part's name and bytes; remembered per size and modification time, so one
    command that opens a file several times (its plan line, its build) reads a large file once."""
    import xxhash

    digest = xxhash.xxh3_128(mapping.encode())
    for name, path, _, _ in parts:
        digest.update(f"{name}:{file_checksum(Path(path))};".encode())
    return digest.hexdigest()


def open_pairs(
    path: Path | str, columns: Mapping[str, tuple[str, ...]] | None = None, option: str = "--columns"
) -> PairsFile:
    """Open a pairs file, folder or saved dataset and map its columns (`columns` first, then the known names);
    `option` is the flag that maps columns, named in the error when a role has no column."""
    path = Path(path)
    if not path.exists():
        raise PairsFileError(f"{path}: no such file or folder", param=str(path))
    files = _files_of(path)
    found = _columns_of(files[0])
    mapping = resolve_mapping(found, dict(columns or {}), files[0], option)
    for file in files[1:]:
        if _kind(file) in (
            "csv",
            "tsv",
            "parquet",
            "arrow",
        ):  # a header to check; a JSON row is checked as read
            missing = [c for cols in mapping.values() for c in cols if c not in _columns_of(file)]
            if missing:
                raise PairsFileError(f"{file}: no column {missing[0]!r}, which {files[0].name} has; it has "
                                     f"{list(_columns_of(file))}", param=option)  # fmt: skip
    return PairsFile(path, tuple(files), tuple(found), mapping)


def resolve_mapping(
    found: Iterable[str], given: dict[str, tuple[str, ...]], file: Path, option: str
) -> dict[str, tuple[str, ...]]:
    """{role: columns}: the given ones (each must be a column of the file), the rest by their known names."""
    found = list(found)
    for role, columns in given.items():
        if unknown := [c for c in columns if c not in found]:
            raise PairsFileError(
                f"{file}: {option} {role}={unknown[0]}: no such column; it has {found}", param=option
            )
    mapping = dict(given)
    for role, names in KNOWN_NAMES.items():
        if role not in mapping:
            name = next((n for n in names if n in found), None)
            if name is None:
                raise PairsFileError(
                    f"{file}: no {role} column (looked for {' or '.join(names)}); its columns are {found}: "
                    f"map them with {option} query=COLUMN,positive=COLUMN",
                    param=option,
                )
            mapping[role] = (name,)
    if "negatives" not in mapping:
        numbered = sorted((c for c in found if _NEGATIVE_N.match(c)), key=lambda c: int(c.rsplit("_", 1)[1]))
        single = [c for c in ("negatives", "negative") if c in found]
        if single or numbered:
            mapping["negatives"] = (*single, *numbered)
    used = [c for role in ("query", "positive") for c in mapping[role]]
    if len(used) != len(set(used)):
        raise PairsFileError(f"{file}: query and positive map to the same column {used[0]!r}", param=option)
    return mapping


# Files and columns ---------------------------------------------------------------------------------------


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)


def _files_of(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix.lower() not in SUFFIXES:
            raise PairsFileError(
                f"{path}: not a pairs file; give a {', '.join(SUFFIXES)} file, a folder of them, or a "
                "datasets save_to_disk folder",
                param=str(path),
            )
        return [path]
    if _is_saved_dataset(path):
        return [path]
    files = _data_files(path)
    if not files:
        raise PairsFileError(
            f"{path}: a folder with no {', '.join(SUFFIXES)} files, and not a datasets save_to_disk folder",
            param=str(path),
        )
    return files


def _kind(file: Path) -> str:
    if file.is_dir():
        return "arrow"
    suffix = file.suffix.lower().lstrip(".")
    if suffix == "json":
        return "json_array" if _first_character(file) == "[" else "jsonl"
    return suffix


def _first_character(file: Path) -> str:
    with file.open("rb") as handle:
        while chunk := handle.read(4096):
            if stripped := chunk.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip():
                return stripped[:1].decode("ascii", "replace")
    return ""


def _columns_of(file: Path) -> tuple[str, ...]:
    """The columns of a file: its header, schema, or first JSON object's keys."""
    kind = _kind(file)
    if kind == "parquet":
        import pyarrow.parquet as pq

        return tuple(pq.read_schema(file).names)
    if kind == "arrow":
        return tuple(_saved_split(file).column_names)
    for batch in _READERS[kind](file, None, 1):
        return tuple(batch.columns)
    raise PairsFileError(f"{file}: holds no rows; nothing to read", param=str(file))


def _saved_split(folder: Path):
    from datasets import DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(folder))
    except (OSError, ValueError) as err:
        raise PairsFileError(f"{folder}: cannot load the saved dataset ({err})", param=str(folder)) from None
    if isinstance(loaded, DatasetDict):
        if "train" not in loaded:
            raise PairsFileError(
                f"{folder}: a dataset with splits {list(loaded)} and no train split; save the split to "
                "train on with Dataset.save_to_disk",
                param=str(folder),
            )
        loaded = loaded["train"]
    return loaded


# Readers: (file, wanted columns or None for all, batch rows) -> batches ----------------------------------


def _lines(file: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, decoded as UTF-8 (a byte-order mark at the start is dropped)."""
    with file.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise PairsFileError(
                    f"{file}:{number}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                    "save the file as UTF-8",
                    param=str(file),
                ) from None
            yield number, text


def _batches_of(
    rows: Iterator[tuple[int, dict]], file: Path, wanted: list[str] | None, size: int
) -> Iterator[Batch]:
    """Rows (line, {column: value}) gathered into batches of the `wanted` columns (all of the first row's)."""
    columns: dict[str, list] | None = None
    lines: list[int] = []
    for line, row in rows:
        if columns is None:
            columns = {name: [] for name in (wanted if wanted is not None else row)}
        for name, values in columns.items():
            values.append(row.get(name, MISSING))
        lines.append(line)
        if len(lines) == size:
            yield Batch(columns, lines, file)
            columns, lines = {name: [] for name in columns}, []
    if lines and columns is not None:
        yield Batch(columns, lines, file)


def _read_jsonl(file: Path, wanted: list[str] | None, size: int) -> Iterator[Batch]:
    def rows() -> Iterator[tuple[int, dict]]:
        for number, text in _lines(file):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as err:
                raise PairsFileError(
                    f"{file}:{number}: not a JSON object ({err.msg} at column {err.colno}); fix or remove the "
                    "line",
                    param=str(file),
                ) from None
            if not isinstance(row, dict):
                raise PairsFileError(
                    f"{file}:{number}: a JSON {type(row).__name__}, not an object; write one object a line",
                    param=str(file),
                )
            yield number, row

    return _batches_of(rows(), file, wanted, size)


def _read_json_array(file: Path, wanted: list[str] | None, size: int) -> Iterator[Batch]:
    try:
        data = json.loads(file.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        line = file.read_bytes()[: err.start].count(b"\n") + 1
        raise PairsFileError(f"{file}:{line}: not UTF-8; save the file as UTF-8", param=str(file)) from None
    except json.JSONDecodeError as err:
        raise PairsFileError(
            f"{file}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno}); fix the file",
            param=str(file),
        ) from None
    if not isinstance(data, list):
        raise PairsFileError(f"{file}: expected a JSON array of objects", param=str(file))
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise PairsFileError(
                f"{file}: item {index} of the array is a JSON {type(row).__name__}, not an object",
                param=str(file),
            )
    # An item's line is not kept by the parser: items are numbered from 1 instead.
    return _batches_of(((i, row) for i, row in enumerate(data, 1)), file, wanted, size)


def _read_delimited(delimiter: str):
    """A reader of CSV (`,`) or TSV (`\t`) files: a header row names the columns."""

    def read(file: Path, wanted: list[str] | None, size: int) -> Iterator[Batch]:
        return _batches_of(_delimited_rows(file, delimiter), file, wanted, size)

    return read


def _delimited_rows(file: Path, delimiter: str) -> Iterator[tuple[int, dict]]:
    """(line, {column: field}) of each row after the header; a row's line is the last one it spans (a quoted
    field may hold line breaks)."""
    read_to = [0]  # the line the csv reader has consumed up to

    def texts() -> Iterator[str]:
        for number, text in _lines(file):
            read_to[0] = number
            yield text

    csv.field_size_limit(sys.maxsize)  # a long text is one field: the default limit is 128 KiB
    reader = csv.reader(texts(), delimiter=delimiter)
    try:
        header = next(reader, None)
        for fields in reader:
            if not fields:
                continue  # a blank line
            if header is not None and len(fields) != len(header):
                raise PairsFileError(
                    f"{file}:{read_to[0]}: {len(fields)} fields where the header has {len(header)}; quote a "
                    f"field that holds the delimiter ({delimiter!r}) or fix the row",
                    param=str(file),
                )
            yield read_to[0], dict(zip(header or (), fields, strict=True))
    except csv.Error as err:
        raise PairsFileError(f"{file}:{read_to[0]}: {err}; fix the row", param=str(file)) from None


def _read_parquet(file: Path, wanted: list[str] | None, size: int) -> Iterator[Batch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(file)
        first = 1
        for record_batch in parquet.iter_batches(batch_size=size, columns=wanted):
            rows = record_batch.num_rows
            yield Batch(record_batch.to_pydict(), list(range(first, first + rows)), file)
            first += rows
    except (pa.ArrowException, OSError) as err:
        raise PairsFileError(f"{file}: not a readable parquet file ({err})", param=str(file)) from None


def _read_saved(folder: Path, wanted: list[str] | None, size: int) -> Iterator[Batch]:
    dataset = _saved_split(folder)
    if wanted is not None:
        dataset = dataset.select_columns(wanted)
    first = 1
    for rows in dataset.iter(batch_size=size):
        count = len(next(iter(rows.values())))
        yield Batch(dict(rows), list(range(first, first + count)), folder)
        first += count


_READERS = {
    "jsonl": _read_jsonl,
    "json_array": _read_json_array,
    "csv": _read_delimited(","),
    "tsv": _read_delimited("\t"),
    "parquet": _read_parquet,
    "arrow": _read_saved,
}
