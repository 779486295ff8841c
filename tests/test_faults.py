"""Faults a real user meets, each with the promise that holds it (docs/reliability.md lists them):

- two writers of one output directory: the second stops at once, naming the first; the first is unharmed;
- a writer killed with SIGKILL: no stale lock, and a re-run finishes to the result an uninterrupted run gives;
- a damaged file (truncated weights, index, store or vectors; --out naming a file): one line naming it;
- the server under a slow client, a killed inference process, and SIGTERM while a client stalls.

Tests that run whole commands twice are marked slow (`pytest -m slow`); the rest run by default.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from test_serve_cli import start, wait_healthy
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.index import build_index, load_index
from neoembed.run_files import OutputLocked, one_writer
from neoembed.serve import ServeSettings, create_app, serve_in_thread

pytestmark = pytest.mark.faults  # the fault suite: docs/reliability.md

runner = CliRunner()
KEY = {"Authorization": "Bearer from-env"}  # test_serve_cli.start serves with this API key
NEOEMBED = [sys.executable, "-m", "neoembed"]
WORDS = [
    "ant",
    "bee",
    "cat",
    "dog",
    "elk",
    "fox",
    "gnu",
    "hen",
    "ibis",
    "jay",
    "kiwi",
    "lark",
    "mole",
    "newt",
    "owl",
    "pig",
    "quail",
    "rat",
    "seal",
    "toad",
]


def write_corpus(path: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for i in range(n):
            text = " ".join(rng.choice(WORDS, size=8)) + f" number {i}"
            f.write(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")
    return path


def one_line_error(result, verb: str, *fragments: str, exit_code: int = 2) -> str:
    """The CLI's answer to bad input (exit 2) or a failed run (`exit_code` 1): last, one line
    `neoembed VERB: ...` holding each fragment (after what the command prints of its plan, if anything); never
    a traceback."""
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("neoembed ")]
    assert "Traceback" not in result.output and errors == lines[-1:], result.output
    assert errors[0].startswith(f"neoembed {verb}: "), errors[0]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("faults") / "docs.jsonl", 300)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("index") / "index"
    build_index([corpus], out, model="minilm", threads=2, tune_queries=50, dtype="float32")
    return out


# --- two writers -----------------------------------------------------------------------------------------


def test_two_index_builds_into_one_directory_one_stops_at_once_and_the_index_is_right(tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 2500)  # the first build runs while the second starts
    out = tmp_path / "index"
    args = [
        "index",
        "build",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--threads",
        "1",
        "--dtype",
        "float32",
    ]
    first = subprocess.Popen([*NEOEMBED, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not (out / ".index.lock.holder").exists():
        assert first.poll() is None, first.stdout.read()
        time.sleep(0.05)
    second = subprocess.run([*NEOEMBED, *args], capture_output=True, text=True)
    assert second.returncode == 2, second.stderr
    assert f"is being written by process {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert first.wait() == 0, first.stdout.read()
    index = load_index(out)
    assert (out / "vectors.f32").stat().st_size == 2500 * 384 * 4
    assert [p.name for p in out.glob("*.faiss")] == [index.manifest.index_file]
    text = json.loads(corpus.read_text().splitlines()[2250])["text"]  # past the rows a race once doubled
    assert index.search(text, k=1)[0].id == "doc-2250"


# The lock each command takes on its output directory, and a command line that reaches it.
WRITERS = {
    "build-data": ("build", lambda d, c: ["build-data", "--out", d, "--max-rows", "10"]),
    "index build": ("index", lambda d, c: ["index", "build", "--corpus", c, "--out", d]),
    "index add": ("index", lambda d, c: ["index", "add", d, "--corpus", c]),
    "index rebuild": ("index", lambda d, c: ["index", "rebuild", d]),
    "pretrain": ("run", lambda d, c: ["pretrain", "--recipe", "pretrain-cpu", "--train.output_dir", d]),
    "contrastive": (
        "run",
        lambda d, c: [
            "contrastive",
            "--recipe",
            "contrastive-cpu",
            "--data.path",
            c + ".build",  # no build there: the run's lock is met first (a pairs file would be built first)
            "--train.output_dir",
            d,
        ],
    ),
    "mteb-eval": (
        "mteb-eval",
        lambda d, c: ["mteb-eval", "-m", "bm25", "-t", "WordNetDefinitionRetrieval", "-o", d],
    ),
    "export onnx": ("export", lambda d, c: ["export", "onnx", "minilm", d]),
    "glue": ("glue", lambda d, c: ["glue", "--model", "minilm", "--task", "rte", "-o", d]),
}


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """Another process holding every command's lock, each on its own directory; yields (pid, directories)."""
    root = tmp_path_factory.mktemp("held")
    dirs = {verb: root / verb.replace(" ", "-") for verb in WRITERS}
    code = (
        "import sys, time, contextlib; from pathlib import Path; from neoembed.run_files import one_writer\n"
        "with contextlib.ExitStack() as stack:\n"
        "    for arg in sys.argv[1:]:\n"
        "        path, name = arg.split('=')\n"
        "        stack.enter_context(one_writer(Path(path), name))\n"
        "    print('held', flush=True); time.sleep(600)\n"
    )
    specs = [f"{dirs[verb]}={lock}" for verb, (lock, _) in WRITERS.items()]
    holder = subprocess.Popen([sys.executable, "-c", code, *specs], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    yield holder.pid, dirs
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("verb", list(WRITERS))
def test_a_second_writer_of_any_command_is_refused_naming_the_first(held, verb, corpus):
    pid, dirs = held
    _, command = WRITERS[verb]
    result = runner.invoke(app, command(str(dirs[verb]), str(corpus)))
    one_line_error(result, verb, f"is being written by process {pid}")


def test_a_killed_writer_leaves_no_lock_behind(tmp_path):
    code = "import time; from pathlib import Path; from neoembed.run_files import one_writer\n"
    code += f"with one_writer(Path({str(tmp_path)!r}), 'index'):\n    print('held', flush=True); time.sleep(600)\n"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(OutputLocked, match=f"process {holder.pid}"), one_writer(tmp_path, "index"):
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with one_writer(tmp_path, "index"):  # the kernel released the lock with the process
        assert json.loads((tmp_path / ".index.lock.holder").read_text())["pid"] == os.getpid()


# --- killed writers re-run to the uninterrupted result -------------------------------------------------


def kill_when(command: list[str], ready, timeout: float = 300) -> None:
    """Run `command`, SIGKILL it once `ready()` holds, and wait for it to be gone."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, "the command finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 600])  # killed right after embedding began, and half-way through
def test_an_index_build_killed_at_any_point_reruns_to_the_same_index(tmp_path, rows):
    corpus = write_corpus(tmp_path / "docs.jsonl", 1200)
    args = ["index", "build", "--corpus", str(corpus), "--threads", "1", "--dtype", "float32"]
    subprocess.run([*NEOEMBED, *args, "--out", str(tmp_path / "reference")], check=True, capture_output=True)
    killed = tmp_path / "killed"
    vectors = killed / "vectors.f32"
    kill_when(
        [*NEOEMBED, *args, "--out", str(killed)],
        lambda: vectors.exists() and vectors.stat().st_size >= rows * 1536,
    )
    assert not (killed / "manifest.json").exists()
    subprocess.run([*NEOEMBED, *args, "--out", str(killed)], check=True, capture_output=True)
    assert vectors.read_bytes() == (tmp_path / "reference" / "vectors.f32").read_bytes()
    reference, resumed = (
        json.loads((d / "manifest.json").read_text()) for d in (tmp_path / "reference", killed)
    )
    for field in ("model_fingerprint", "ntotal", "factory", "dimension"):
        assert resumed[field] == reference[field], field
    assert resumed["files"]["vectors.f32"] == reference["files"]["vectors.f32"]


@pytest.mark.slow
def test_mteb_eval_killed_mid_run_reruns_to_the_same_results(tmp_path):
    args = [
        *NEOEMBED,
        "mteb-eval",
        "-m",
        "minilm",
        "-m",
        "bm25",
        "-t",
        "WordNetDefinitionRetrieval,FOLDOCDefinitionRetrieval",
    ]
    subprocess.run([*args, "-o", str(tmp_path / "reference")], check=True, capture_output=True)
    killed = tmp_path / "killed"
    kill_when([*args, "-o", str(killed)], lambda: any(killed.rglob("WordNetDefinitionRetrieval.json")))
    subprocess.run([*args, "-o", str(killed)], check=True, capture_output=True)
    reference = (tmp_path / "reference" / "summary.csv").read_text()
    assert (killed / "summary.csv").read_text() == reference


@pytest.mark.slow
def test_an_export_killed_mid_write_reruns_to_a_whole_export(tmp_path):
    out = tmp_path / "export"
    command = [*NEOEMBED, "export", "onnx", "minilm", str(out)]
    kill_when(command, lambda: (out / "model.safetensors").exists())
    assert (out / ".export-unfinished").exists()
    subprocess.run(command, check=True, capture_output=True)
    report = json.loads((out / "onnx" / "export.json").read_text())
    assert (
        report["files"]["model.onnx"]["worst_cosine"] > 0.9999 and not (out / ".export-unfinished").exists()
    )
    refused = runner.invoke(app, ["export", "onnx", "minilm", str(out)])  # a finished export is kept
    one_line_error(refused, "export onnx", "is not empty")


# --- damaged files --------------------------------------------------------------------------------------


def truncate(path: Path, fraction: float = 0.5) -> None:
    os.truncate(path, int(path.stat().st_size * fraction))


def damaged_copy(index_dir: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    target = copy / (load_index(index_dir).manifest.index_file if name == "faiss" else name)
    truncate(target)
    return copy


@pytest.mark.parametrize(
    ("damaged", "command"),
    [
        ("faiss", lambda d: ["search", "--index", d, "ant bee"]),
        ("faiss", lambda d: ["index", "add", d, "--corpus", "CORPUS"]),
        ("docs.sqlite", lambda d: ["search", "--index", d, "ant bee"]),
        ("vectors.f32", lambda d: ["index", "export", d, "--out", f"{d}.parquet"]),
        ("vectors.f32", lambda d: ["index", "rebuild", d]),
    ],
)
def test_a_damaged_index_file_is_named_in_one_line(index_dir, tmp_path, corpus, damaged, command):
    copy = damaged_copy(index_dir, tmp_path, damaged)
    args = [str(corpus) if a == "CORPUS" else a for a in command(str(copy))]
    verb = " ".join(a for a in args[:2] if not a.startswith("-")) if args[0] == "index" else args[0]
    one_line_error(runner.invoke(app, args), verb, "is damaged")


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_faiss_file_is_rebuilt_from_the_intact_vectors(index_dir, tmp_path, damage):
    """The command a damaged .faiss is answered with, `index rebuild`, checks the documents and vectors by their
    checksums and makes the index again from them; search then finds every document as before."""
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    faiss_file = copy / load_index(index_dir).manifest.index_file
    if damage == "truncated":
        truncate(faiss_file)
    else:
        with faiss_file.open("r+b") as f:
            f.seek(faiss_file.stat().st_size // 2)
            f.write(b"\xff" * 64)
    line = one_line_error(
        runner.invoke(app, ["search", "--index", str(copy), "ant bee"]), "search", "is damaged"
    )
    assert f"neoembed index rebuild {copy}` makes it again from the stored vectors" in line
    result = runner.invoke(app, ["index", "rebuild", str(copy), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert not faiss_file.exists()  # replaced, under a new name
    rebuilt, original = load_index(copy), load_index(index_dir)
    assert rebuilt.manifest.ntotal == original.manifest.ntotal
    query = "ant bee cat dog elk fox gnu hen number 7"
    assert [h.id for h in rebuilt.search(query, k=3)] == [h.id for h in original.search(query, k=3)]


def test_index_rebuild_still_refuses_damaged_documents(index_dir, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    with (copy / "docs.sqlite").open("r+b") as f:
        f.seek((copy / "docs.sqlite").stat().st_size // 2)
        f.write(b"\x00" * 16)  # a document's bytes: SQLite itself would read it without a word
    line = one_line_error(runner.invoke(app, ["index", "rebuild", str(copy)]), "index rebuild", "docs.sqlite")
    assert "build the index again from its corpus" in line


def test_a_resumed_add_refuses_a_damaged_committed_row_and_seals_nothing(index_dir, tmp_path, corpus):
    """What an `index add` killed mid-embedding leaves (its state file, vector rows past the committed ones),
    then one committed row overwritten: the re-run must not append to it nor write a manifest that records it."""
    copy = tmp_path / "index"
    shutil.copytree(index_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "build_state.json").write_text(json.dumps({"add_to": manifest["ntotal"]}))
    row_bytes = manifest["dimension"] * 4
    with (copy / "vectors.f32").open("r+b") as vectors:
        vectors.seek(0, os.SEEK_END)
        vectors.write(np.ones((3, manifest["dimension"]), np.float32).tobytes())  # the add's own rows
        vectors.seek(7 * row_bytes)
        vectors.write(np.zeros(manifest["dimension"], np.float32).tobytes())  # a committed row damaged
    more = write_corpus(tmp_path / "more.jsonl", 5)
    more.write_text(more.read_text().replace('"doc-', '"more-'))
    result = runner.invoke(app, ["index", "add", str(copy), "--corpus", str(more)])
    one_line_error(result, "index add", "vectors.f32 is damaged")
    assert json.loads((copy / "manifest.json").read_text()) == manifest


@pytest.fixture(scope="module")
def truncated_minilm(tmp_path_factory, minilm_path):
    copy = tmp_path_factory.mktemp("model") / "minilm"
    shutil.copytree(minilm_path, copy)
    truncate(copy / "model.safetensors")
    return copy


@pytest.mark.parametrize(
    "command",
    [
        lambda m, c, o: ["encode", "--model", m, "a text"],
        lambda m, c, o: ["index", "build", "--model", m, "--corpus", c, "--out", o],
        lambda m, c, o: ["serve", "--model", m],
    ],
    ids=["encode", "index build", "serve"],
)
def test_truncated_weights_are_named_in_one_line(truncated_minilm, corpus, tmp_path, command):
    args = command(str(truncated_minilm), str(corpus), str(tmp_path / "out"))
    verb = "index build" if args[0] == "index" else args[0]
    one_line_error(runner.invoke(app, args), verb, "weights file is damaged or truncated")


def test_an_export_whose_vocabulary_was_shuffled_is_refused(minilm_path, tmp_path):
    """The same number of tokens, the words moved: every check of size and unknown words passes, and the
    embeddings are garbage. The export's tokenizer record catches it; a model neoembed did not export (no
    record) loads as before."""
    from neoembed.embedder import TOKENIZER_RECORD, tokenizer_record

    export = tmp_path / "export"
    shutil.copytree(minilm_path, export)
    (export / TOKENIZER_RECORD).write_text(json.dumps(tokenizer_record(export)))  # as an export writes it
    encode = ["encode", "--model", str(export), "a text"]
    assert runner.invoke(app, encode).exit_code == 0
    words = (export / "vocab.txt").read_text().splitlines()
    moved = words[:1000] + random.Random(0).sample(words[1000:], len(words) - 1000)  # specials stay
    (export / "vocab.txt").write_text("\n".join(moved) + "\n")
    (export / "tokenizer.json").unlink()
    one_line_error(runner.invoke(app, encode), "encode", "tokenizer maps tokens to other ids")
    (export / TOKENIZER_RECORD).unlink()
    assert runner.invoke(app, encode).exit_code == 0


@pytest.mark.parametrize("permuted", ["vocab.txt", "tokenizer.json"])
def test_a_model_without_a_record_whose_vocabulary_was_permuted_is_refused(minilm_path, tmp_path, permuted):
    """The packaged MiniLM, which no neoembed export wrote (no record), with one of its two vocabularies
    permuted (ids moved among the words past the specials): they disagree, and every command refuses it."""
    model = tmp_path / "minilm"
    shutil.copytree(minilm_path, model)
    if permuted == "vocab.txt":
        words = (model / "vocab.txt").read_text().splitlines()
        moved = words[:1000] + random.Random(0).sample(words[1000:], len(words) - 1000)
        (model / "vocab.txt").write_text("\n".join(moved) + "\n")
    else:
        tokenizer = json.loads((model / "tokenizer.json").read_text())
        vocab = tokenizer["model"]["vocab"]
        words = [word for word, number in vocab.items() if number >= 1000]
        numbers = random.Random(0).sample([vocab[word] for word in words], len(words))
        vocab.update(zip(words, numbers))
        (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    for args, verb in [
        (["encode", "--model", str(model), "a cat", "a kitten"], "encode"),
        (
            ["index", "build", "--model", str(model), "--corpus", "wordnet", "--out", str(tmp_path / "i")],
            "index build",
        ),
        (["export", "onnx", str(model), str(tmp_path / "export")], "export onnx"),
    ]:
        one_line_error(runner.invoke(app, args), verb, "its vocab.txt and tokenizer.json disagree on")


def test_an_output_that_is_a_file_is_named_in_one_line(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    one_line_error(runner.invoke(app, ["build-data", "--out", str(a_file)]), "build-data", "is a file")
    one_line_error(runner.invoke(app, ["export", "onnx", "minilm", str(a_file)]), "export onnx", "is a file")


@pytest.mark.parametrize("verb", ["index build", "build-data"])
@pytest.mark.parametrize("place", ["below-a-file", "/proc/neoembed-test"])
def test_an_output_that_cannot_be_created_is_named_in_one_line(tmp_path, corpus, verb, place):
    if place == "below-a-file":
        (tmp_path / "a-file").write_text("not a directory")
        place = str(tmp_path / "a-file" / "sub")
    args = ["--corpus", str(corpus), "--model", "minilm"] if verb == "index build" else ["--no-mine"]
    result = runner.invoke(app, [*verb.split(), *args, "--out", place])
    one_line_error(result, verb, place)


def test_a_command_line_byte_that_is_not_utf8_is_named_in_one_line():
    for args in (["search", "--index", "x", "caf\udcff"], ["encode", "caf\udcff"]):
        result = runner.invoke(app, args)  # what Python makes of the byte 0xff in argv (PEP 383)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert (
            result.output.strip()
            == "neoembed: argument 'caf\\xff' is not valid UTF-8; pass text and paths in UTF-8"
        )


@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_model_path_that_is_a_broken_link_is_named_in_one_line(tmp_path, link):
    model = tmp_path / "model"
    model.symlink_to(model if link == "loop" else tmp_path / "gone")
    why = "loops" if link == "loop" else "which is missing"
    one_line_error(runner.invoke(app, ["encode", "--model", str(model), "a text"]), "encode", why)


def test_corpus_rows_that_are_not_utf8_are_counted_and_named_once(tmp_path, caplog):
    from neoembed.index.corpus import CorpusReader

    corpus = tmp_path / "docs.txt"
    corpus.write_bytes(b"caf\xe9 au lait\nplain text\nna\xefve\n")
    reader = CorpusReader([corpus])
    texts = [doc.text for _, doc in reader]
    assert texts == ["caf\ufffd au lait", "plain text", "na\ufffdve"]
    assert (reader.not_utf8.count, reader.not_utf8.first) == (2, ["docs.txt:1", "docs.txt:3"])
    out = tmp_path / "index"
    with caplog.at_level("WARNING", logger="neoembed.index"):
        build_index([corpus], out, model="minilm", threads=1, tune_queries=2, dtype="float32")
    warnings = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert warnings == [
        "2 rows hold bytes that are not UTF-8, read with U+FFFD in their place (first: docs.txt:1)"
    ]


ENOSPC_SCRIPT = """
set -e
mount -t tmpfs -o size=400k tmpfs "$DIR"
set +e
"$PYTHON" -m neoembed index build --corpus "$CORPUS" --out "$DIR/index" --dtype float32 --threads 1 >/dev/null 2>"$LOG"
echo "rc=$?"
ls -a "$DIR/index" | tr '\\n' ' '; echo
mount -o remount,size=8m "$DIR"
"$PYTHON" -m neoembed index build --corpus "$CORPUS" --out "$DIR/index" --dtype float32 --threads 1 >/dev/null 2>"$LOG.second"
echo "rc=$?"
ls -a "$DIR/index" | tr '\\n' ' '; echo
"""


def test_a_full_disk_is_one_line_with_the_free_space_and_leaves_no_partial_file(tmp_path, corpus):
    """A 400 KiB file system (a tmpfs in a user namespace) under `index build`: one line naming the file
    and the space left, no partial file; with room again, the same command finishes the build."""
    disk, log = tmp_path / "disk", tmp_path / "stderr.txt"
    disk.mkdir()
    mount = ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)]
    if shutil.which("unshare") is None or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("no user namespace here to mount a small file system in")
    env = {**os.environ, "DIR": str(disk), "CORPUS": str(corpus), "LOG": str(log), "PYTHON": sys.executable}
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", ENOSPC_SCRIPT], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    first_rc, first_files, second_rc, second_files = run.stdout.splitlines()
    lines = [line for line in log.read_text().splitlines() if line.startswith("neoembed ")]
    assert first_rc == "rc=2" and "Traceback" not in log.read_text(), log.read_text()
    assert len(lines) == 1 and "No space left on device" in lines[0] and "free there" in lines[0], lines
    assert str(disk / "index") in lines[0]
    assert ".tmp" not in first_files and ".faiss" not in first_files, first_files
    assert second_rc == "rc=0", (tmp_path / "stderr.txt.second").read_text()
    assert ".tmp" not in second_files and second_files.count(".faiss") == 1, second_files


# --- finite or refused ---------------------------------------------------------------------------------

THE = 1996  # the id of "the" in MiniLM's vocabulary


@pytest.fixture(scope="module")
def nan_minilm(tmp_path_factory, minilm_path):
    """The packaged MiniLM with the word-embedding row of "the" set to NaN: every text holding "the" embeds to
    NaN, every other text as before."""
    from safetensors.torch import load_file, save_file

    copy = tmp_path_factory.mktemp("model") / "minilm-nan"
    shutil.copytree(minilm_path, copy)
    weights = load_file(copy / "model.safetensors")
    (name,) = [n for n in weights if n.endswith("word_embeddings.weight")]
    weights[name][THE] = float("nan")
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def nan_corpus(path: Path) -> Path:
    """Ten documents, three of them ("d2", "d5", "d8") holding the word "the"."""
    texts = [f"{'the' if i % 3 == 2 else 'a'} {WORDS[i]} of {WORDS[i + 1]}" for i in range(10)]
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def test_encode_refuses_non_finite_vectors_naming_the_rows(nan_minilm, tmp_path):
    out = tmp_path / "vectors.npy"
    args = ["encode", "--model", str(nan_minilm), "--output", str(out), "a cat", "the dog", "an owl"]
    line = one_line_error(runner.invoke(app, args), "encode", "non-finite", "row 1;", exit_code=1)
    assert "nan" not in line.lower().replace("nan or", "")
    assert not out.exists()
    assert runner.invoke(app, ["encode", "--model", str(nan_minilm), "a cat", "an owl"]).exit_code == 0


def test_index_build_refuses_non_finite_vectors_naming_the_documents(nan_minilm, tmp_path):
    out = tmp_path / "index"
    args = ["index", "build", "--model", str(nan_minilm), "--corpus", str(nan_corpus(tmp_path / "d.jsonl"))]
    result = runner.invoke(app, [*args, "--out", str(out), "--threads", "1"])
    one_line_error(result, "index build", "documents 'd2', 'd5', 'd8'", "rows 2, 5, 8", exit_code=1)
    assert not (out / "manifest.json").exists() and not list(out.glob("*.faiss"))
    assert not (out / "vectors.f32").exists() or (out / "vectors.f32").stat().st_size == 0


def test_index_add_refuses_non_finite_vectors_and_the_index_stays_as_it_was(nan_minilm, corpus, tmp_path):
    out = tmp_path / "index"
    build_index([corpus], out, model=str(nan_minilm), threads=1, tune_queries=20, dtype="float32")
    manifest = (out / "manifest.json").read_text()
    args = ["index", "add", str(out), "--corpus", str(nan_corpus(tmp_path / "d.jsonl")), "--threads", "1"]
    one_line_error(runner.invoke(app, args), "index add", "documents 'd2', 'd5', 'd8'", exit_code=1)
    assert (out / "manifest.json").read_text() == manifest
    assert load_index(out).search("ant bee", k=1)[0].id.startswith("doc-")


def test_export_onnx_refuses_a_model_with_a_non_finite_weight(nan_minilm, tmp_path):
    out = tmp_path / "export"
    line = one_line_error(
        runner.invoke(app, ["export", "onnx", str(nan_minilm), str(out)]),
        "export onnx", "word_embeddings.weight", f"(first: {THE})", exit_code=1,
    )  # fmt: skip
    assert "1 row" in line
    assert not (out / "onnx").exists() and not (out / "model.safetensors").exists()


def test_a_contrastive_export_refuses_a_model_with_a_non_finite_weight(nan_minilm, tmp_path):
    from neoembed.contrastive.export import export_model
    from neoembed.embedder import NonFiniteWeights, load_embedder

    with pytest.raises(NonFiniteWeights, match=f"word_embeddings.weight .* in 1 row \\(first: {THE}\\)"):
        export_model(load_embedder(str(nan_minilm)), tmp_path / "export", facts=None)
    assert not (tmp_path / "export").exists()


def test_mteb_eval_fails_the_task_on_non_finite_vectors_and_caches_no_result(nan_minilm, tmp_path):
    args = ["mteb-eval", "-m", str(nan_minilm), "--tasks", "WordNetDefinitionRetrieval", "-o", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.output.count("FAILED") == 1
    failed = " ".join(result.output.split("FAILED")[1].split())  # the console wraps it at its width
    assert failed.startswith(
        "minilm-nan / WordNetDefinitionRetrieval: WordNetDefinitionRetrieval (default, test)"
    )
    assert "the model gave non-finite vectors (NaN or infinity) for rows " in failed
    assert "Traceback" not in result.output
    assert not list((tmp_path / "results").rglob("WordNetDefinitionRetrieval.json"))


# --- the server ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_limits(neobert_embedder):
    settings = ServeSettings(
        model=str(neobert_embedder), threads=1, dtype="float32", header_timeout=1.0, body_timeout=1.0
    )
    app_ = create_app(settings)
    with serve_in_thread(app_) as url:
        yield url, app_.state.server


def raw_connection(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_an_idle_connection_is_closed_after_the_header_timeout(quick_limits):
    url, _ = quick_limits
    with raw_connection(url) as conn:
        started = time.monotonic()
        assert conn.recv(1024) == b""  # closed by the server, having sent nothing
        assert 0.8 < time.monotonic() - started < 5


def test_half_a_body_gets_408_after_the_body_timeout(quick_limits):
    url, _ = quick_limits
    with raw_connection(url) as conn:
        head = "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        conn.sendall(head.encode() + b'{"input": "half')
        started = time.monotonic()
        answer = b""
        while b'"code":"request_timeout"' not in answer and (chunk := conn.recv(65536)):
            answer += chunk  # the head and the body may come in separate packets
        answer = answer.decode()
        assert answer.startswith("HTTP/1.1 408") and '"code":"request_timeout"' in answer
        assert time.monotonic() - started < 5
    assert httpx.post(f"{url}/embed", json={"inputs": "still serving"}).status_code == 200


def test_sigterm_while_a_client_stalls_exits_within_the_limits(neobert_embedder):
    process, base = start("--model", str(neobert_embedder), "--body-timeout", "2", "--shutdown-timeout", "5")
    try:
        wait_healthy(process, base)
        with raw_connection(base) as stalled:
            stalled.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
            time.sleep(0.2)
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once it has drained, so the exit status says "terminated by SIGTERM".
            assert process.wait(timeout=30) in (0, -signal.SIGTERM)
            assert time.monotonic() - started < 10
    finally:
        process.kill()
