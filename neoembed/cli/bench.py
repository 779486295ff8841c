"""`neoembed bench ...`: throughput and quality benchmarks.

Each command times its variants inside one run on this machine, prints ratios, and writes JSON plus a
markdown table under its output directory.
"""

from pathlib import Path

import typer

from neoembed.errors import InputError

app = typer.Typer(
    help="Benchmarks: each writes JSON and a markdown table and prints ratios measured in one run.",
    no_args_is_help=True,
)


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _device(name: str) -> str:
    """`auto` is CUDA when present, else the CPU; a CUDA device that is not there is a bad flag."""
    import torch

    from neoembed.precision import default_device

    if name == "auto":
        return default_device()
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise typer.BadParameter("no CUDA device is available here", param_hint="--device")
    return name


def _echo_report(result: dict) -> None:
    """Every benchmark returns its markdown table, an optional one-line summary, and the files it wrote."""
    typer.echo(result["table"])
    if result.get("summary"):
        typer.echo(result["summary"])
    typer.echo(f"wrote {result['json']} and {result['markdown']}")


@app.command("encode")
def encode(
    configs: str = typer.Option("tiny,full", help="NeoBERT sizes: tiny (2x64) and/or full (28x768, 250M)."),
    dtypes: str = typer.Option(
        "auto",
        help="fp32 and/or bf16 weights (norms and RoPE stay fp32); auto: fp32, plus bf16 where it has "
        "hardware (CUDA, or a CPU with AVX512-BF16/AMX).",
    ),
    lengths: str = typer.Option(
        "", help="Fixed sequence lengths (default 128,512,1024; with --compare 512,1024,2048,4096)."
    ),
    mixed: str = typer.Option("16,512", help="MIN,MAX token lengths of the mixed-length batch."),
    compare: str | None = typer.Option(
        None, help="modernbert: also time transformers' ModernBERT-base (random weights) on the same batches."
    ),
    repeats: int = typer.Option(2, min=1, help="Timed runs per path; the best is kept."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads."),
    device: str = typer.Option("auto", help="cpu, cuda, cuda:N, or auto."),
    tokens_per_batch: int = typer.Option(
        0, min=0, help="Tokens per timed batch (0: 8192 tiny, 2048 full on CPU; 65536 on CUDA)."
    ),
    out: Path = typer.Option(Path("runs/bench/encode"), help="Directory for encode.json and encode.md."),
    backends: str | None = typer.Option(
        None,
        help="Instead of the NeoBERT paths: compare inference backends of --model on WordNet glosses, e.g. "
        "torch-fp32,torch-bf16,onnx-fp32,onnx-int8 (writes encode-backends.json/.md).",
    ),
    model: str = typer.Option("minilm", help="With --backends: the embedder."),
    texts: int = typer.Option(1024, min=1, help="With --backends: WordNet glosses to embed."),
    batch_size: int = typer.Option(32, min=1, help="With --backends: texts per batch."),
):
    """NeoBERT forward throughput: padded vs unpadded path on fixed and mixed lengths, optionally vs ModernBERT;
    or, with --backends, an embedder's speed and fidelity on torch fp32/bf16 and ONNX fp32/int8."""
    from neoembed.bench import encode as bench_encode
    from neoembed.precision import resolve_precision

    if backends is not None:
        from neoembed.bench import backends as bench_backends

        unknown = [b for b in _csv(backends) if b not in bench_backends.BACKENDS]
        if unknown or not _csv(backends):
            raise InputError(
                f"--backends: unknown {unknown}; choose from {list(bench_backends.BACKENDS)}",
                param="--backends",
            )
        result = bench_backends.run(
            model, _csv(backends), bench_backends.wordnet_glosses(texts), batch_size, repeats, threads, out
        )
        _echo_report(result)
        return

    unknown = [c for c in _csv(configs) if c not in bench_encode.CONFIGS]
    if unknown:
        raise InputError(
            f"--configs: unknown {unknown}; choose from {list(bench_encode.CONFIGS)}", param="--configs"
        )
    device = _device(device)
    if dtypes == "auto":
        dtypes = "fp32,bf16" if resolve_precision("auto", device).bf16_supported else "fp32"
    bad_dtypes = [d for d in _csv(dtypes) if d not in ("fp32", "bf16")]
    if bad_dtypes:
        raise InputError(f"--dtypes: unknown {bad_dtypes}; choose fp32 and/or bf16", param="--dtypes")
    if "bf16" in _csv(dtypes) and not resolve_precision("auto", device).bf16_supported:
        typer.echo(
            f"note: bf16 has no matrix units on this {device}; torch emulates it, far slower than fp32"
        )
    if compare is not None and compare not in bench_encode.COMPARISONS:
        raise typer.BadParameter(f"choose from {list(bench_encode.COMPARISONS)}", param_hint="--compare")
    try:
        low, high = (int(n) for n in _csv(mixed))
    except ValueError:
        raise typer.BadParameter("give two integers MIN,MAX", param_hint="--mixed") from None
    if not 1 <= low <= high:
        raise typer.BadParameter("need 1 <= MIN <= MAX", param_hint="--mixed")
    result = bench_encode.run(
        configs=_csv(configs),
        dtypes=_csv(dtypes),
        fixed_lengths=[int(n) for n in _csv(lengths)],
        repeats=repeats,
        threads=threads,
        device=device,
        tokens_per_batch=tokens_per_batch or None,
        out_dir=out,
        compare=compare,
        mixed_range=(low, high),
    )
    _echo_report(result)


@app.command("index")
def index(
    n: int = typer.Option(200_000, min=0, help="Synthetic structured vectors in the base set (0: skip)."),
    dim: int = typer.Option(384, min=8, help="Dimension of the synthetic vectors."),
    queries: int = typer.Option(1000, min=10, help="Held-out queries per vector set."),
    target_recall: float = typer.Option(0.95, help="recall@10 each candidate is tuned to reach."),
    threads: int = typer.Option(2, min=1, help="faiss and torch threads."),
    wordnet: bool = typer.Option(True, help="Also bench the WordNet glosses embedded by --model."),
    wordnet_index: Path = typer.Option(
        Path("runs/index/wordnet-minilm"), help="WordNet index to read vectors from (built if missing)."
    ),
    model: str = typer.Option("minilm", help="Embedder for the WordNet set."),
    out: Path = typer.Option(Path("runs/bench/index"), help="Directory for index.json and index.md."),
):
    """FAISS candidates vs exact search: build time, size, tuned recall@10, batch and single-query QPS."""
    from neoembed.bench import index as bench_index

    result = bench_index.run(
        n=n, dim=dim, queries=queries, target=target_recall, threads=threads,
        wordnet_index=wordnet_index if wordnet else None, model=model, out_dir=out,
    )  # fmt: skip
    _echo_report(result)


@app.command("build-data")
def build_data(
    rows: int = typer.Option(1_000_000, min=0, help="Synthetic rows for normalisation + dedup (0 skips)."),
    long_rows: int = typer.Option(20_000, min=0, help="GitHubIssues-shaped long rows staged beside them."),
    encode_texts: int = typer.Option(1200, min=0, help="Texts the teacher encodes for its rate (0 skips)."),
    search_pool: int = typer.Option(100_000, min=0, help="Pool of the timed part search (0 skips)."),
    search_queries: int = typer.Option(20_000, min=1, help="Queries of the timed part search."),
    project_pairs: int = typer.Option(9_000_000, min=1, help="Pairs of the projected build."),
    gpu_tokens_per_s: float = typer.Option(1e6, help="Assumed H100 teacher tokens/s, for the projection."),
    gpu_gflop_per_s: float = typer.Option(
        20_000, help="Assumed H100 flat-search GFLOP/s, for the projection."
    ),
    mining_rows: int = typer.Option(0, min=0, help="WordNet rows to mine end to end (0 skips)."),
    dtypes: str = typer.Option("float32,bfloat16", help="Teacher dtypes to compare for mining."),
    threads: int = typer.Option(2, min=1, help="torch and faiss threads."),
    batch_size: int = typer.Option(128, min=1, help="Teacher encoding batch size."),
    keep: bool = typer.Option(False, help="Keep the generated data and builds under OUT/work."),
    out: Path = typer.Option(Path("runs/bench/build-data"), help="Directory for build-data.json and .md."),
):
    """Contrastive builder: per-stage rates and peak RSS on real-shaped synthetic data, a 9M-pair projection."""
    from neoembed.bench import build_data as bench_build_data

    bad = [d for d in _csv(dtypes) if d not in ("float32", "bfloat16")]
    if bad:
        raise InputError(f"--dtypes: unknown {bad}; choose float32 and/or bfloat16", param="--dtypes")
    result = bench_build_data.run(
        rows,
        long_rows,
        mining_rows,
        _csv(dtypes),
        threads,
        batch_size,
        encode_texts,
        search_pool,
        search_queries,
        project_pairs,
        gpu_tokens_per_s,
        gpu_gflop_per_s,
        out,
        keep,
    )
    _echo_report(result)


@app.command("mteb")
def mteb(
    model: str = typer.Option("minilm", help="Embedder to time (any `mteb-eval --model` except bm25)."),
    batch_size: int = typer.Option(32, min=1, help="Encoding batch size (harness and direct alike)."),
    repeats: int = typer.Option(3, min=1, help="Timed runs per side, alternated; the best is kept."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads."),
    out: Path = typer.Option(Path("runs/bench/mteb"), help="Directory for mteb.json and mteb.md."),
):
    """mteb-eval harness vs direct model.encode on the local WordNet tasks: texts/s and overhead."""
    from neoembed.bench import mteb as bench_mteb

    result = bench_mteb.run(model, batch_size, repeats, threads, out)
    _echo_report(result)


@app.command("serve")
def serve(
    models: str = typer.Option(
        "minilm,neobert",
        help="Embedders to serve and to call directly; 'neobert' is a quickstart-size NeoBERT export.",
    ),
    texts: int = typer.Option(4096, min=16, help="WordNet glosses to embed per round."),
    texts_per_request: int = typer.Option(16, min=1, help="Texts in each client request."),
    clients: int = typer.Option(16, min=1, help="Concurrent clients."),
    repeats: int = typer.Option(2, min=1, help="Rounds per side, alternated; the best is kept."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads, in the server and for direct encode."),
    direct_batch_sizes: str = typer.Option(
        "32,256", help="encode batch sizes to time; the first (32, encode's default) is the ratio's baseline."
    ),
    out: Path = typer.Option(Path("runs/bench/serve"), help="Directory for serve.json, serve.md and logs."),
):
    """HTTP server under concurrent clients vs direct model.encode: texts/s, ratio, latency, /health p95."""
    from neoembed.bench import serve as bench_serve

    result = bench_serve.run(
        models=_csv(models),
        texts=texts,
        texts_per_request=texts_per_request,
        clients=clients,
        repeats=repeats,
        threads=threads,
        out_dir=out,
        direct_batch_sizes=tuple(int(size) for size in _csv(direct_batch_sizes)),
    )
    _echo_report(result)


@app.command("pretrain")
def pretrain(
    config: str = typer.Option("small", help="small (4 x 256) or full (the 250M NeoBERT)."),
    max_length: int = typer.Option(512, min=16, help="Row length of both layouts."),
    token_budget: int = typer.Option(
        0, min=0, help="Token slots per step in both layouts (0: 8192 on CPU, 32768 on CUDA)."
    ),
    steps: int = typer.Option(5, min=1, help="Timed training steps per layout."),
    warmup_steps: int = typer.Option(1, min=0, help="Untimed steps per layout first (use 3 with --compile)."),
    device: str = typer.Option("auto", help="cpu, cuda, cuda:N, or auto."),
    dtype: str = typer.Option(
        "auto", help="fp32, bf16 (autocast over fp32 weights), or auto (bf16 on GPUs)."
    ),
    compile: bool = typer.Option(False, "--compile/--no-compile", help="Compile the blocks (torch.compile)."),
    threads: int = typer.Option(2, min=1, help="torch CPU threads."),
    peak_tflops: float = typer.Option(
        0.0, min=0.0, help="Device peak for MFU (0: the known-GPU table in bf16, else a measured matmul)."
    ),
    out: Path = typer.Option(
        Path("runs/bench/pretrain"), help="Directory for pretrain.json and pretrain.md."
    ),
):
    """MLM training throughput and MFU: packed vs padded batches on a length-skewed corpus."""
    from neoembed.bench import pretrain as bench_pretrain

    if config not in bench_pretrain.CONFIGS:
        raise InputError(
            f"--config: unknown {config!r}; choose from {list(bench_pretrain.CONFIGS)}", param="--config"
        )
    if dtype not in ("auto", "fp32", "bf16"):
        raise typer.BadParameter(f"unknown dtype {dtype!r}; choose fp32, bf16 or auto", param_hint="--dtype")
    result = bench_pretrain.run(
        config,
        max_length,
        token_budget or None,
        steps,
        threads,
        peak_tflops or None,
        out,
        device=_device(device),
        dtype=dtype,
        compile=compile,
        warmup_steps=warmup_steps,
    )
    _echo_report(result)


@app.command("contrastive")
def contrastive(
    data: Path | None = typer.Option(
        None,
        help="A finished build-data output to train on (default: the default WordNet build, under --out).",
    ),
    rows: int = typer.Option(
        20000, min=100, help="WordNet rows of the default build (build-data --max-rows)."
    ),
    recipe: str = typer.Option("contrastive-cpu", help="neoembed's recipe: a packaged name or a YAML file."),
    set_: list[str] = typer.Option(
        [], "--set", help="KEY=VALUE override of the neoembed recipe (e.g. optim.lr=5e-5); repeatable."
    ),
    minutes: float = typer.Option(10.0, min=0.01, help="CPU training budget per model (minutes of steps)."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads, for every model (1 on a shared machine)."),
    model: str = typer.Option("minilm", help="Base model both trainers fine-tune."),
    neobert: str | None = typer.Option(None, help="A pretrained NeoBERT directory to run the recipe on too."),
    fresh: bool = typer.Option(False, help="Retrain instead of reusing finished runs under --out."),
    out: Path = typer.Option(Path("runs/bench/contrastive"), help="Directory for contrastive.json and .md."),
):
    """neoembed's recipe vs plain sentence-transformers (MNRL), same data, base and CPU budget: held-out
    WordNet, FOLDOC and POS scores next to the base model and BM25, and issue 17's target checks."""
    from neoembed.bench import contrastive as bench_contrastive
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import parse_overrides

    malformed = [item for item in set_ if "=" not in item]
    if malformed:
        raise InputError(f"--set {malformed[0]!r}: expected KEY=VALUE", param="--set")
    overrides = parse_overrides([f"--{item}" for item in set_])
    result = bench_contrastive.run(
        data=data,
        rows=rows,
        recipe=resolve_recipe(recipe),
        overrides=overrides,
        minutes=minutes,
        threads=threads,
        base=model,
        neobert=neobert,
        out_dir=out,
        fresh=fresh,
    )
    _echo_report(result)
