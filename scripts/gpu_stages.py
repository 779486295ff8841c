"""The stages of the GPU run (scripts/gpu_bench.py run): what each runs, at which sizes, and what it needs; no
side effects.

One list serves both modes: on a CUDA machine the sizes of docs/benchmarks/gpu.md (the 250M NeoBERT, bf16,
1024- and 4096-token rows); with `dry_run`, tiny sizes on the CPU that run the same commands in seconds and
write the same JSON, so the runner and the docs generator are tested where there is no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neoembed.contrastive import ContrastiveSettings
from neoembed.recipes import override_args


def contrastive_overrides(max_steps: str, batch_size: str, max_length: str) -> tuple[str, ...]:
    """The contrastive stage's size overrides of its recipe."""
    return tuple(
        override_args(
            ContrastiveSettings,
            (lambda r: r.train.max_steps, max_steps),
            (lambda r: r.train.batch_size, batch_size),
            (lambda r: r.model.max_length, max_length),
        )
    )


@dataclass(frozen=True)
class Sizes:
    """Every size a stage takes from the mode."""

    device: str
    encode: tuple[str, ...]  # `bench encode` options shared by its three stages
    forward_length: int  # the fixed length of the forward-throughput target
    mixed: str  # MIN,MAX of the mixed-length target
    long_length: int  # the ModernBERT comparison's length
    bench_pretrain: tuple[str, ...]  # `bench pretrain` options shared by its stages
    long_row: int  # bench pretrain's second row length
    pretrain_config: dict[
        str, int
    ]  # NeoBERTConfig fields of the pretrain/deepspeed stages ({}: the 250M model)
    pretrain_length: int
    pretrain_batch: int  # packed rows per step
    pretrain_steps: int
    precision: str
    peak_tflops: float | None  # the pretrain stages' MFU peak (None: the GPU table's, by device name)
    corpus_documents: int
    corpus_max_words: int
    deepspeed_steps: int
    wordnet_rows: int  # rows of the WordNet build the contrastive stage trains on
    contrastive: tuple[str, ...]  # overrides of the contrastive stage
    contrastive_speed: tuple[str, ...]  # `bench contrastive --speed` options
    serve: tuple[str, ...]
    gpu_tests: tuple[str, ...]  # test files whose gpu-marked tests run


# The two modes side by side, each option beside its value.
# fmt: off
CUDA = Sizes(
    device="cuda",
    encode=("--configs", "full", "--dtypes", "bf16", "--device", "cuda", "--repeats", "3"),
    forward_length=512,
    mixed="64,4096",
    long_length=4096,
    bench_pretrain=("--config", "full", "--device", "cuda", "--dtype", "bf16", "--steps", "20"),
    long_row=4096,
    pretrain_config={},
    pretrain_length=1024,
    pretrain_batch=32,
    pretrain_steps=200,
    precision="bf16",
    peak_tflops=None,
    corpus_documents=10_000,
    corpus_max_words=3000,
    deepspeed_steps=20,
    wordnet_rows=50_000,
    contrastive=contrastive_overrides(max_steps="100", batch_size="32", max_length="256"),
    contrastive_speed=("--recipe", "contrastive-neobert", "--batch-size", "4096", "--mini-batch-size", "512",
                       "--warmup-steps", "2", "--steps", "5", "--precisions", "bf16", "--threads", "4"),
    serve=("--models", "neobert", "--backends", "torch-fp32,torch-bf16", "--texts", "8192", "--clients", "32",
           "--direct-batch-sizes", "32,64,128,256,512,1024,2048", "--openai-processes", "4"),
    gpu_tests=("tests/test_neobert_model.py", "tests/test_neobert_backends.py"),
)

DRY_RUN = Sizes(
    device="cpu",
    encode=("--configs", "tiny", "--dtypes", "fp32", "--device", "cpu", "--repeats", "1"),
    forward_length=32,
    mixed="8,64",
    long_length=64,
    bench_pretrain=("--config", "small", "--device", "cpu", "--dtype", "fp32", "--steps", "1",
                    "--token-budget", "128"),
    long_row=64,
    pretrain_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "intermediate_size": 64},
    pretrain_length=32,
    pretrain_batch=4,
    pretrain_steps=3,
    precision="fp32",
    peak_tflops=0.1,  # about a 2-core CPU's fp32 matmul peak: MFU is then recorded, as on the GPU
    corpus_documents=200,
    corpus_max_words=60,
    deepspeed_steps=2,
    wordnet_rows=200,
    contrastive=contrastive_overrides(max_steps="2", batch_size="4", max_length="32"),
    contrastive_speed=("--recipe", "contrastive-neobert", "--batch-size", "8", "--mini-batch-size", "4",
                       "--warmup-steps", "1", "--steps", "1", "--precisions", "fp32", "--threads", "2",
                       "--set", "model.max_length=32"),
    serve=("--models", "neobert", "--texts", "32", "--clients", "2", "--repeats", "1",
           "--health-requests", "8"),
    gpu_tests=("tests/test_neobert_backends.py",),
)
# fmt: on


@dataclass(frozen=True)
class Stage:
    """One command of the GPU run, writing under its own directory `out`."""

    name: str
    title: str
    out: Path
    command: tuple[str, ...]  # after `python -m`: a module and its arguments
    needs: tuple[str, ...] = ()  # optional packages (neoembed.extras.OPTIONAL keys); a missing one skips it
    needs_files: tuple[Path, ...] = ()  # inputs made elsewhere (the WordNet build); a missing one skips it
    env: dict[str, str] = field(default_factory=dict)
    recipe: dict[str, Any] | None = None  # written to out/recipe.yaml before the command runs


# The order stages run in: the targets first, so that a window cut short has measured what matters
# most; the compiled bench (minutes of compilation) last.
ORDER = (
    "gpu-tests",
    "encode",
    "encode-mixed",
    "pretrain",
    "bench-pretrain",
    "encode-modernbert",
    "serve",
    "deepspeed",
    "wordnet-build",
    "contrastive",
    "contrastive-speed",
    "bench-pretrain-long",
    "bench-pretrain-compiled",
)

# Named sets of stages (`gpu_bench.py run --stages NAME`), each sized to a window of device time.
SETS = {
    # Issue 41, "fast by default": compiled training MFU (train.compile auto), the compiled-by-default
    # forward, ModernBERT eager beside eager and compiled beside compiled, serve against encode at its
    # best batch, and contrastive pairs/s against the library's cached loss. About 7 minutes on an
    # H100/H200, estimated from the stage times of docs/benchmarks/gpu (2026-11-26, H200) and the compile
    # times measured there: pretrain 73 s eager, about 65 s compiled (its steps at 240k tokens/s instead
    # of 132k, plus compilation); encode 19 s eager, about 40 s with compilation in its warm-up (3.5 s a
    # graph); encode-modernbert 32 s eager, up to 135 s with the compiled pair (ModernBERT's whole-model
    # compilation 20-42 s a graph, two warm-up batches); serve 65 s, about 85 s with compiled servers;
    # wordnet-build 10 s; contrastive-speed about 80 s (two processes, each loading the 250M model and
    # the build, 7 steps of 4096 pairs at about 1 s of GPU work each). 410 s of stages, plus the
    # script's setup. ORDER runs pretrain and wordnet-build before contrastive-speed, which needs them.
    "fast-by-default": (
        "pretrain",
        "encode",
        "encode-modernbert",
        "serve",
        "wordnet-build",
        "contrastive-speed",
    ),
}


def selected_stages(names: tuple[str, ...]) -> set[str]:
    """The stage names `--stages` asks for, each set name (SETS) standing for its stages."""
    return {stage for name in names for stage in SETS.get(name, (name,))}


def sizes_for(dry_run: bool) -> Sizes:
    return DRY_RUN if dry_run else CUDA


def corpus_path(root: Path) -> Path:
    """The synthetic corpus the pretrain stages read (written once by the runner)."""
    return root / "corpus.txt"


def plan(dry_run: bool, root: Path, wordnet_build: Path | None) -> list[Stage]:
    """Every stage, in the order they run (ORDER)."""
    s = sizes_for(dry_run)

    def encode(name: str, title: str, *args: str) -> Stage:
        out = root / name
        return Stage(name, title, out, ("neoembed", "bench", "encode", *s.encode, *args, "--out", str(out)))

    def bench_pretrain(name: str, title: str, *args: str) -> Stage:
        out = root / name
        return Stage(
            name, title, out, ("neoembed", "bench", "pretrain", *s.bench_pretrain, *args, "--out", str(out))
        )

    def pretrain(name: str, title: str, deepspeed: bool) -> Stage:
        out = root / name
        command = ("neoembed", "pretrain", "--recipe", str(out / "recipe.yaml"))
        if deepspeed:
            command = ("torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m", *command)
        recipe = pretrain_recipe(s, str(corpus_path(root)), str(out / "run"), deepspeed)
        env = {"DS_ACCELERATOR": "cpu"} if deepspeed and dry_run else {}
        return Stage(name, title, out, command, ("deepspeed",) if deepspeed else (), (), env, recipe)

    tests = root / "gpu-tests"
    build = wordnet_build or root / "wordnet-build"
    contrastive = root / "contrastive"
    pretrained = root / "pretrain" / "run" / "final"  # the pretrain stage's model, for the contrastive stages
    serve = root / "serve"
    stages = [
        Stage(
            "gpu-tests",
            "gpu-marked tests",
            tests,
            ("pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--junitxml", str(tests / "junit.xml"))
            + s.gpu_tests,
        ),
        encode(
            "encode", "forward, padded vs unpadded path", "--lengths", f"{s.forward_length},{s.long_length}"
        ),
        encode(
            "encode-mixed", "forward, mixed-length batch", "--lengths", str(s.long_length), "--mixed", s.mixed
        ),
        encode(
            "encode-modernbert",
            "forward vs ModernBERT-base",
            "--compare",
            "modernbert",
            "--lengths",
            f"{s.forward_length},{s.long_length}",
        ),
        bench_pretrain("bench-pretrain", "MLM training layouts", "--max-length", str(s.pretrain_length)),
        bench_pretrain(
            "bench-pretrain-compiled",
            "MLM training layouts, compiled blocks",
            "--max-length",
            str(s.pretrain_length),
            "--compile",
            "--warmup-steps",
            "3",
        ),
        bench_pretrain(
            "bench-pretrain-long", "MLM training layouts, long rows", "--max-length", str(s.long_row)
        ),
        pretrain("pretrain", "neoembed pretrain, packed rows", deepspeed=False),
        pretrain("deepspeed", "neoembed pretrain under DeepSpeed ZeRO-2 on one device", deepspeed=True),
        Stage(
            "wordnet-build",
            "build-data of WordNet pairs for the contrastive stage (no mining: no teacher weights there)",
            root / "wordnet-build",
            ("neoembed", "build-data", "--sources", "wordnet", "--max-rows", str(s.wordnet_rows), "--no-mine")
            + ("--out", str(root / "wordnet-build")),
        ),
        Stage(
            "contrastive",
            "neoembed contrastive of the pretrained NeoBERT on the WordNet build",
            contrastive,
            ("neoembed", "contrastive", "--recipe", "contrastive-cpu")
            + tuple(
                override_args(
                    ContrastiveSettings,
                    (lambda r: r.data.path, str(build)),
                    (lambda r: r.model.base, str(pretrained)),
                    (lambda r: r.loss.gather, "false"),
                    (lambda r: r.eval.sets, "[wordnet]"),
                    (lambda r: r.train.output_dir, str(contrastive / "run")),
                )
            )
            + s.contrastive,
            needs_files=(build / "stats.json", pretrained),
        ),
        Stage(
            "contrastive-speed",
            "neoembed contrastive vs sentence-transformers' cached loss: pairs/s and peak memory (GradCache)",
            root / "contrastive-speed",
            ("neoembed", "bench", "contrastive", "--speed", "--data", str(build), "--model", str(pretrained))
            + (*s.contrastive_speed, "--out", str(root / "contrastive-speed")),
            needs_files=(build / "stats.json", pretrained),
        ),
        Stage(
            "serve",
            "neoembed serve under concurrent clients vs direct encode",
            serve,
            ("neoembed", "bench", "serve", *s.serve, "--out", str(serve)),
            needs=("fastapi", "uvicorn", "openai"),
        ),
    ]
    return sorted(stages, key=lambda stage: ORDER.index(stage.name))


def pretrain_recipe(sizes: Sizes, corpus: str, output_dir: str, deepspeed: bool) -> dict[str, Any]:
    """The pretrain stage's recipe (packed rows; evaluation and the checkpoint only at the end) and the
    DeepSpeed stage's (the same, fewer steps, ZeRO-2)."""
    steps = sizes.deepspeed_steps if deepspeed else sizes.pretrain_steps
    train = {
        "output_dir": output_dir,
        "max_steps": steps,
        "log_steps": max(1, steps // 10),
        "eval_steps": steps,
        "eval_batches": 2,
        "save_steps": steps,
        "precision": sizes.precision,
        **({"threads": 2} if sizes.device == "cpu" else {}),
        **({"peak_tflops": sizes.peak_tflops} if sizes.peak_tflops else {}),
        **({"deepspeed": "deepspeed-zero2.json"} if deepspeed else {}),
    }
    return {
        "corpus": {"files": [corpus], "heldout_fraction": 0.01},
        "model": {"config": {**sizes.pretrain_config, "max_length": sizes.pretrain_length}},
        "data": {"max_length": sizes.pretrain_length, "mode": "packed", "batch_size": sizes.pretrain_batch},
        "optim": {"lr": 6e-4, "warmup_steps": max(1, steps // 10)},
        "train": train,
    }
