"""Every documented command is a tested contract.

Each fenced ```bash block of README.md and docs/*.md (not docs/benchmarks/) is read line by line:

1. every neoembed line parses: its verb exists, click accepts its options, and a recipe verb's recipe with
   the line's `--section.field value` overrides validates;
2. every path a line reads is written by an earlier line of the same block, or is a named user input
   (`my-...`, `path/to/...`, a file of the repository or a packaged one);
3. (slow) the blocks that run on a CPU in minutes run end to end, at smoke sizes.

A neoembed line is `neoembed ...`, `python -m neoembed ...`, or `torchrun|deepspeed ... -m neoembed ...`.
"""

from __future__ import annotations

import inspect
import json
import os
import posixpath
import random
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption

from neoembed.cli import app
from neoembed.embedder import MINILM_ALIASES
from neoembed.errors import InputError, NeoembedError
from neoembed.packaged import resolve_recipe
from neoembed.recipes import load_recipe, parse_overrides
from neoembed.workflow import builds_its_data, export_path, pretrain_output

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # not docs/benchmarks/
ROOT = typer.main.get_command(app)

# Parser ------------------------------------------------------------------------------------------------

LAUNCHERS = ("torchrun", "deepspeed")
SEPARATORS = {"&&", "||", ";", "|", "&"}
REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", "&>"}
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
FENCE = re.compile(r"^\s*```(\S*)\s*$")


@dataclass
class Line:
    """One simple command of a block: `a && b` on one line is two."""

    file: str  # relative to the repository
    number: int  # 1-based, where the logical line starts
    argv: list[str]  # without leading VAR=value assignments and redirections
    text: str  # as a message shows it
    args: list[str] | None = None  # neoembed's arguments; None: not a neoembed line
    launcher: str | None = None  # torchrun or deepspeed
    redirected: list[str] = field(default_factory=list)  # `> FILE` targets
    files: dict[str, str] = field(default_factory=dict)  # `cat > FILE <<EOF` heredocs: FILE -> text

    @property
    def where(self) -> str:
        return f"{self.file}:{self.number}"


@dataclass
class Block:
    file: str
    number: int  # the fence's line
    lines: list[Line]

    def __str__(self) -> str:
        return f"{self.file}:{self.number}"

    @property
    def files(self) -> dict[str, str]:
        return {path: text for line in self.lines for path, text in line.files.items()}


def tokens(text: str) -> list[str]:
    """Shell words and operators (`&&`, `|`, `>`, ...) of one logical line, without its `# comment`."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def split_commands(words: list[str]) -> list[list[str]]:
    commands, current = [], []
    for word in words:
        if word in SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(word)
    return [c for c in [*commands, current] if c]


def neoembed_args(argv: list[str]) -> tuple[list[str] | None, str | None]:
    """(neoembed's arguments, launcher) of a command, or (None, None) when it runs something else."""
    program = Path(argv[0]).name
    if program == "neoembed":
        return argv[1:], None
    if program in ("python", "python3") and argv[1:3] == ["-m", "neoembed"]:
        return argv[3:], None
    if program in LAUNCHERS:
        for i in range(1, len(argv) - 1):
            if argv[i : i + 2] == ["-m", "neoembed"]:
                return argv[i + 2 :], program
    return None, None


def make_line(file: str, number: int, words: list[str], heredoc: str | None) -> Line | None:
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    text = shlex.join(words)
    argv, redirected = [], []
    i = 0
    while i < len(words):
        if words[i] in REDIRECTS and i + 1 < len(words):
            if words[i] in (">", ">>"):
                redirected.append(words[i + 1])
            i += 2
        else:
            argv.append(words[i])
            i += 1
    if not argv:
        return None
    args, launcher = neoembed_args(argv)
    files = {target: heredoc for target in redirected} if heredoc is not None else {}
    return Line(file, number, argv, text, args, launcher, redirected, files)


def parse_block(file: str, number: int, raw: list[tuple[int, str]]) -> Block:
    lines, i = [], 0
    while i < len(raw):
        start, text = raw[i]
        while text.endswith("\\") and i + 1 < len(raw):  # a continued line
            i += 1
            text = text[:-1] + " " + raw[i][1]
        i += 1
        words = tokens(text)
        heredoc = None
        if "<<" in words and words.index("<<") + 1 < len(words):
            end, body = words[words.index("<<") + 1], []
            while i < len(raw) and raw[i][1].strip() != end:
                body.append(raw[i][1])
                i += 1
            i += 1  # the terminator
            heredoc = "\n".join(body) + "\n"
        for command in split_commands(words):
            if (line := make_line(file, start, command, heredoc)) is not None:
                lines.append(line)
    return Block(file, number, lines)


def read_blocks(path: Path) -> list[Block]:
    file = str(path.relative_to(REPO))
    blocks, raw, start = [], None, 0
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fence = FENCE.match(text)
        if raw is None and fence and fence.group(1) == "bash":
            raw, start = [], number
        elif raw is not None and fence:
            blocks.append(parse_block(file, start, raw))
            raw = None
        elif raw is not None:
            raw.append((number, text))
    return blocks


BLOCKS = [block for path in DOCS for block in read_blocks(path)]
NEOEMBED_BLOCKS = [block for block in BLOCKS if any(line.args is not None for line in block.lines)]
NEOEMBED_LINES = [line for block in BLOCKS for line in block.lines if line.args is not None]


@dataclass
class Parsed:
    """A neoembed line as the command line reads it (its callback is never run)."""

    verb: str  # e.g. "index build"
    command: Any  # typer's click command
    ctx: typer.Context
    recipe: str | None = None  # recipe verbs: the recipe run (--recipe, or the verb's default)
    settings: Any = None  # recipe verbs: the recipe validated with the line's overrides


def parse(line: Line) -> Parsed:
    """Resolve the verb, let click (typer's) parse the options, and validate a recipe verb's recipe. Raises
    `typer.TyperException` or `NeoembedError` (the current directory decides a default recipe chosen from it)."""
    command, names, rest = ROOT, [], [a for a in line.args if a != "--debug"]
    while isinstance(command, TyperGroup) and rest and not rest[0].startswith("-"):
        sub = command.get_command(typer.Context(command), rest[0])
        if sub is None:
            raise InputError(f"no command {' '.join([*names, rest[0]])!r}")
        command, names, rest = sub, [*names, rest[0]], rest[1:]
    ctx = command.make_context(" ".join(["neoembed", *names]), list(rest), resilient_parsing=False)
    parsed = Parsed(" ".join(names), command, ctx)
    binding = getattr(command.callback, "recipe_binding", None)
    if binding is not None:
        # As `recipe_options` builds the settings: shortcut flags, then the `--section.field value` extras.
        own = inspect.signature(inspect.unwrap(command.callback)).parameters  # the verb's own options
        overrides = {
            name.replace("__", "."): value
            for name, value in ctx.params.items()
            if name not in own and name != "recipe" and value is not None
        }
        overrides.update(parse_overrides(ctx.args))
        parsed.recipe = ctx.params["recipe"] or binding.default()
        parsed.settings = load_recipe(resolve_recipe(parsed.recipe), binding.settings_cls, overrides)
    return parsed


def error_text(error: Exception) -> str:
    if isinstance(error, NeoembedError):
        return error.message
    return error.format_message() if hasattr(error, "format_message") else repr(error)


# Paths read and written ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Io:
    """Which values of a verb name paths: read, directories written, run directories written (the directory
    and everything under it: D/final, D/neobert-embed, ...). A name is a click parameter, a dotted recipe
    field, or a key of `DERIVED`."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()


RECIPE = ("recipe", "train.deepspeed")  # read by every recipe verb
EMBEDDER = ("model.base", "loss.distill.teacher", "eval.sets.path", "export.selection.general.path")
IO = {
    "build-data": Io(reads=("local_data", "eval_texts", "manifests", "pairs"), writes=("out",)),
    "pretrain": Io(
        reads=(*RECIPE, "model.init_from", "model.tokenizer", "model.embeddings_from", "corpus.files"),
        writes=("final",),
        trees=("train.output_dir",),
    ),
    "contrastive": Io(
        reads=(*RECIPE, *EMBEDDER, "data.path"),
        writes=("export.path", "data.build"),
        trees=("train.output_dir",),
    ),
    "adapt": Io(reads=(*RECIPE, *EMBEDDER, "corpus.path", "corpus.eval_texts"), trees=("train.output_dir",)),
    "glue": Io(reads=(*RECIPE, "model", "data_dir", "tokenizer", "mnli_checkpoint"), trees=("output",)),
    "mteb-eval": Io(reads=("models", "tasks", "prompts_file", "datasets_dir"), trees=("output",)),
    "index build": Io(reads=("model", "corpus"), writes=("out",)),
    "index add": Io(reads=("index", "corpus", "model")),
    "index rebuild": Io(reads=("index",)),
    "index export": Io(reads=("index",), writes=("out",)),
    "search": Io(reads=("index", "model")),
    "serve": Io(reads=("model", "index")),
    "encode": Io(reads=("model", "file"), writes=("output",)),
    "export onnx": Io(reads=("model",), writes=("out_dir",)),
    "runs compare": Io(reads=("runs",), writes=("output",)),
    "quickstart": Io(trees=("run_dir",)),
}
# Values a run computes rather than names: pretrain leaves <train.output_dir>/final; contrastive exports to
# <train.output_dir>/neobert-embed unless export.path says elsewhere, and builds data.path itself where its
# recipe's data.build writes that path.
DERIVED: dict[str, Callable[[Parsed], dict[str, Any]]] = {
    "pretrain": lambda p: {"final": pretrain_output(p.settings)},
    "contrastive": lambda p: {
        "export.path": export_path(p.settings),
        "data.path": None if builds_its_data(p.settings) else p.settings.data.path,
        "data.build": p.settings.data.path if builds_its_data(p.settings) else None,
    },
}


# Project modules documented as `python -m MODULE ARGS` that write paths.
MODULE_WRITES = {"neoembed.glue.synthetic": lambda args: args[:1]}
HUB_IDS = {"chandar-lab/NeoBERT", "answerdotai/ModernBERT-base", "tiiuae/falcon-refinedweb"}
MODEL_NAMES = {*MINILM_ALIASES, "bm25", "bm25s", *HUB_IDS}
EXTENSIONS = (".jsonl", ".txt", ".parquet", ".json", ".yaml", ".csv", ".tsv")


def values(parsed: Parsed, name: str) -> list[str]:
    derived = DERIVED.get(parsed.verb, lambda p: {})(parsed)
    if name == "recipe":
        found = [parsed.ctx.params.get("recipe")]  # a default recipe is a packaged one
    elif name in derived:
        found = [derived[name]]
    elif name in parsed.ctx.params:
        found = [parsed.ctx.params[name]]
    else:  # a dotted recipe field, through lists (eval.sets.path: each set's path)
        found = [parsed.settings]
        for part in name.split("."):
            found = [x for v in found for x in flat(getattr(v, part, None))]
    found = [x for v in found for x in flat(v)]
    return [posixpath.normpath(str(v)) for v in found if v is not None and str(v) != ""]


def flat(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def label(parsed: Parsed, name: str) -> str:
    for param in parsed.command.params:
        if param.name == name and isinstance(param, TyperOption):
            return max(param.opts, key=len)
        if param.name == name:
            return name.upper()
    return name


@dataclass
class Written:
    exact: set[str] = field(default_factory=set)
    trees: set[str] = field(default_factory=set)

    def covers(self, path: str) -> bool:
        return path in self.exact or any(path == t or path.startswith(t + "/") for t in self.trees)


def is_path(value: str, written: Written) -> bool:
    """Model names (minilm, bm25, hub ids) are not; text with a `/` or a file's extension is, and so is a
    user's input named `my-...`."""
    if value in MODEL_NAMES:
        return False
    return "/" in value or value.endswith(EXTENSIONS) or value.startswith("my-") or written.covers(value)


def is_user_input(path: str) -> bool:
    """`my-...`, `path/to/...`, or a file of the repository (a packaged file resolves to one)."""
    first = Path(path).parts[0]
    return (
        first.startswith("my-") or path.startswith("path/to/") or (first != "runs" and (REPO / path).exists())
    )


def write_files(files: dict[str, str], directory: Path) -> None:
    for path, text in files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text, encoding="utf-8")


@dataclass
class Step:
    line: Line
    parsed: Parsed | None = None
    inputs: list[str] = field(default_factory=list)  # user inputs read, for the run to create


def trace(block: Block, sandbox: Path) -> tuple[list[Step], list[str]]:
    """Each line of `block` in order with its parse, and the problems: lines that do not parse, and paths
    read that no earlier line writes. Runs in `sandbox` (the current directory), where written directories
    are made as they are written, so a default recipe chosen from what is there is the one a user gets."""
    write_files(block.files, sandbox)
    written, steps, problems = Written(), [], []

    def write(paths: list[str], tree: bool) -> None:
        for path in paths:
            (written.trees if tree else written.exact).add(posixpath.normpath(path))
            if not Path(path).is_absolute() and not (sandbox / path).exists():
                (sandbox / path).mkdir(parents=True)

    for line in block.lines:
        step = Step(line)
        steps.append(step)
        if line.args is None:
            written.exact.update(posixpath.normpath(path) for path in line.redirected)
            module = line.argv[2] if line.argv[1:2] == ["-m"] and len(line.argv) > 2 else None
            write(MODULE_WRITES.get(module, lambda args: [])(line.argv[3:]), tree=False)
            continue
        try:
            step.parsed = parsed = parse(line)
        except (typer.TyperException, NeoembedError) as err:
            problems.append(f"{line.where}: {line.text} does not parse: {error_text(err)}")
            continue
        io = IO.get(parsed.verb, Io())
        for name in io.reads:
            for path in values(parsed, name):
                if not is_path(path, written) or written.covers(path):
                    continue
                if is_user_input(path):
                    step.inputs.append(path)
                else:
                    problems.append(
                        f"{line.where}: {line.text} reads {path} ({label(parsed, name)}), which no earlier "
                        "line of this block writes"
                    )
        write([v for name in io.writes for v in values(parsed, name)], tree=False)
        write([v for name in io.trees for v in values(parsed, name)], tree=True)
    return steps, problems


# Tests ---------------------------------------------------------------------------------------------------


def test_the_docs_hold_neoembed_lines():
    assert len(NEOEMBED_LINES) >= 30 and len(NEOEMBED_BLOCKS) >= 10  # the parser finds them


@pytest.mark.parametrize("line", NEOEMBED_LINES, ids=lambda line: line.where)
def test_every_documented_command_parses(line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = next(b for b in BLOCKS if line in b.lines)
    write_files(block.files, tmp_path)  # a recipe the block writes, e.g. grid.yaml
    try:
        parse(line)
    except (typer.TyperException, NeoembedError) as err:
        pytest.fail(f"{line.where}: {line.text}: {error_text(err)}", pytrace=False)


@pytest.mark.parametrize("block", NEOEMBED_BLOCKS, ids=str)
def test_every_path_read_is_written_earlier_or_a_user_input(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, problems = trace(block, tmp_path)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# End to end at smoke sizes -------------------------------------------------------------------------------

PAPER_RECIPES = {"neobert-stage1", "neobert-stage2", "contrastive-neobert", "glue"}  # glue: with --grid


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def not_cpu(block: Block) -> str | None:
    """Why `block` does not run on a CPU in minutes (None: it does)."""
    lines = [line for line in block.lines if line.args is not None]
    if not lines:
        return "no neoembed line"
    for line in lines:
        args, verb = line.args, line.args[0]
        recipe = Path(option(args, "--recipe") or "").stem
        if line.launcher:
            return f"{line.launcher}"
        if recipe in PAPER_RECIPES and (recipe != "glue" or "--grid" in args):
            return f"paper-scale recipe {recipe}"
        if option(args, "--sources") == "all":
            return "--sources all"
        if any("MTEB(eng" in a for a in args):
            return "an MTEB(eng) benchmark"
        if verb in ("serve", "bench"):
            return f"{verb}: a server or a benchmark of minutes"
        if option(args, "--corpus") == "wordnet":
            return "an index of all 117k WordNet glosses"
        if set(args) & HUB_IDS or (verb == "glue" and not option(args, "--data-dir")):
            return "the Hugging Face hub"
    return None


CPU_BLOCKS = [block for block in NEOEMBED_BLOCKS if not_cpu(block) is None]

# Appended to each verb's documented arguments (later values win): a couple of steps, few rows, one thread.
STEPS = [
    "--train.save_steps",
    "2",
    "--train.log_steps",
    "1",
    "--train.eval_steps",
    "2",
    "--train.threads",
    "1",
]
SMOKE: dict[str, list[str] | Callable[[Any], list[str]]] = {
    "build-data": ["--max-rows", "200"],  # mining kept: 200 rows mine in seconds
    "pretrain": ["--train.max_steps", "2", *STEPS],
    "contrastive": lambda s: [
        *["--steps", "2", *STEPS, "--train.batch_size", "8", "--eval.sets", "[]"],
        *["--export.selection.in_domain", "20"],
        *(["--data.build.max_rows", "200"] if s.data.build else []),
    ],
    "adapt": [
        *["--steps", "2", *STEPS, "--train.batch_size", "8", "--model.max_length", "32"],
        *["--corpus.min_documents", "50", "--corpus.selection", "40", "--export.selection.general", "[]"],
    ],
    "glue": ["--max-train-samples", "16", "--max-eval-samples", "16", "--epochs", "1", "--threads", "1"],
    "mteb-eval": ["--threads", "1"],
    "index build": ["--tune-queries", "20", "--threads", "1"],
    "index add": ["--tune-queries", "20", "--threads", "1"],
    "index rebuild": ["--tune-queries", "20", "--threads", "1"],
    "search": ["--threads", "1"],
}
WORDS = (
    "river", "stone", "light", "city", "market", "signal", "engine", "forest", "garden", "winter", "music",
    "paper", "window", "bridge", "magnet", "copper", "planet", "harbor", "letter", "season", "valley",
)  # fmt: skip


def project_python(argv: list[str]) -> bool:
    """`python -m neoembed.MODULE ...` or `python -c CODE` that uses neoembed: run in the block's order."""
    if Path(argv[0]).name not in ("python", "python3") or len(argv) < 3:
        return False
    return (argv[1] == "-m" and argv[2].startswith("neoembed.")) or (
        argv[1] == "-c" and "neoembed" in argv[2]
    )


def create_input(path: Path) -> None:
    """A small stand-in for a user's file: labelled pairs (a name with pairs), a BEIR test folder (a name with
    beir), documents (.jsonl, .txt, .parquet), a NeoBERT directory (a name with neobert), else a
    sentence-transformers directory (the packaged MiniLM)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(path.name)
    texts = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30))) + f" {path.stem} {i}."
        for i in range(300)
    ]
    if "pairs" in path.name:
        rows = [
            {"anchor": f"{' '.join(text.split()[:3])} {i}", "positive": text} for i, text in enumerate(texts)
        ]
        if path.suffix == ".csv":
            path.write_text("anchor,positive\n" + "".join(f"{r['anchor']},{r['positive']}\n" for r in rows))
        else:
            path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif "beir" in path.name:
        (path / "qrels").mkdir(parents=True)
        docs = "".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(texts))
        (path / "corpus.jsonl").write_text(docs)
        queries = [
            json.dumps({"_id": f"q{i}", "text": " ".join(texts[i].split()[:4])}) + "\n" for i in range(20)
        ]
        (path / "queries.jsonl").write_text("".join(queries))
        qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(20))
        (path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    elif path.suffix == ".jsonl":
        rows = [json.dumps({"id": f"{path.stem}-{i}", "text": text}) for i, text in enumerate(texts)]
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    elif path.suffix == ".txt":
        path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": [f"{path.stem}-{i}" for i in range(len(texts))], "text": texts}), path)
    elif "neobert" in path.name:
        from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
        from neoembed.pretrain.neobert.tokenizer import load_tokenizer

        NeoBERTModel(tiny_config()).eval().save_pretrained(path)
        load_tokenizer(max_length=128).save_pretrained(path)
    else:
        from neoembed.embedder import packaged_minilm_path

        shutil.copytree(packaged_minilm_path(), path)


@pytest.mark.slow
@pytest.mark.parametrize("block", CPU_BLOCKS, ids=str)
def test_cpu_blocks_run_end_to_end(block, tmp_path, monkeypatch):
    (sandbox := tmp_path / "trace").mkdir()
    monkeypatch.chdir(sandbox)
    steps, _ = trace(block, sandbox)
    (run := tmp_path / "run").mkdir()
    for path in {p for step in steps for p in step.inputs if not (REPO / p).exists()}:
        create_input(run / path)
    for step in steps:
        line = step.line
        write_files(line.files, run)
        if line.args is not None:
            smoke = SMOKE.get(step.parsed.verb, []) if step.parsed else []
            smoke = smoke(step.parsed.settings) if callable(smoke) else smoke
            argv = [sys.executable, "-m", "neoembed", *line.args, *smoke]
        elif project_python(line.argv):
            argv = [sys.executable, *line.argv[1:]]
        else:
            continue
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        result = subprocess.run(argv, cwd=run, env=env, capture_output=True, text=True, timeout=1800)
        assert result.returncode == 0, (
            f"{line.where}: {line.text} exited {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
