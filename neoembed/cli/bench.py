"""`neoembed bench ...`: throughput and quality benchmarks.

Each command times its variants inside one run on this machine, prints ratios, and writes JSON plus a
markdown table under its output directory. The options of each are the fields of its settings in
`neoembed.bench.settings`.
"""

import typer

from neoembed.bench import (
    AdaptBench,
    BuildDataBench,
    ContrastiveBench,
    EncodeBench,
    IndexBench,
    MtebBench,
    PretrainBench,
    ScaleBench,
    ServeBench,
    WrittenReport,
)
from neoembed.cli.options import Flag, options_from

app = typer.Typer(
    help="Benchmarks: each writes JSON and a markdown table and prints ratios measured in one run.",
    no_args_is_help=True,
)


def _echo_report(written: WrittenReport) -> None:
    """Every benchmark writes one report: print it and the files it went to."""
    typer.echo(written.markdown)
    typer.echo(f"wrote {written.json_path} and {written.markdown_path}")


@app.command("encode")
@options_from(EncodeBench)
def encode(settings: EncodeBench) -> None:
    """NeoBERT forward throughput: padded vs unpadded path on fixed and mixed lengths, optionally vs ModernBERT;
    or, with --backends, an embedder's speed and fidelity on torch fp32/bf16 and ONNX fp32/int8."""
    from neoembed.bench import encode as bench_encode

    if settings.backends:
        from neoembed.bench import backends as bench_backends

        _echo_report(bench_backends.run(settings))
        return
    _echo_report(bench_encode.run(settings))


@app.command("index")
@options_from(IndexBench)
def index(settings: IndexBench) -> None:
    """FAISS candidates vs exact search: build time, size, tuned recall@10, batch and single-query QPS."""
    from neoembed.bench import index as bench_index

    _echo_report(bench_index.run(settings))


@app.command("build-data")
@options_from(BuildDataBench)
def build_data(settings: BuildDataBench) -> None:
    """Contrastive builder: per-stage rates and peak RSS on real-shaped synthetic data, a 9M-pair projection."""
    from neoembed.bench import build_data as bench_build_data

    _echo_report(bench_build_data.run(settings))


@app.command("mteb")
@options_from(MtebBench)
def mteb(settings: MtebBench) -> None:
    """mteb-eval harness vs direct model.encode on the local WordNet tasks: texts/s and overhead."""
    from neoembed.bench import mteb as bench_mteb

    _echo_report(bench_mteb.run(settings))


@app.command("serve")
@options_from(ServeBench)
def serve(settings: ServeBench) -> None:
    """HTTP server under concurrent clients vs direct model.encode: texts/s, ratio, latency, /health p95;
    with --backends, a server per inference backend, with its speed-up and fidelity."""
    from neoembed.bench import serve as bench_serve

    _echo_report(bench_serve.run(settings))


@app.command("pretrain")
@options_from(PretrainBench)
def pretrain(settings: PretrainBench) -> None:
    """MLM training throughput and MFU: packed vs padded batches on a length-skewed corpus."""
    from neoembed.bench import pretrain as bench_pretrain

    _echo_report(bench_pretrain.run(settings))


@app.command("contrastive")
@options_from(ContrastiveBench, flags=[Flag("overrides", ("--set",))])
def contrastive(settings: ContrastiveBench) -> None:
    """neoembed's recipe vs plain sentence-transformers (MNRL), same data, base and CPU budget: held-out
    WordNet, FOLDOC and POS scores next to the base model and BM25, and the goal checks; or, with --speed,
    training pairs/s and peak memory against the library's cached loss on the same pairs and batches."""
    if settings.speed:
        from neoembed.bench import contrastive_speed as bench_contrastive_speed

        _echo_report(bench_contrastive_speed.run(settings))
        return
    from neoembed.bench import contrastive as bench_contrastive

    _echo_report(bench_contrastive.run(settings))


@app.command("adapt")
@options_from(AdaptBench, flags=[Flag("overrides", ("--set",))])
def adapt(settings: AdaptBench) -> None:
    """neoembed adapt vs plain sentence-transformers on three corpora (FOLDOC definitions, Debian package
    descriptions, the Jargon File's definitions): MNRL on the adaptation's pairs for as many steps, TSDAE on
    the same documents for as many CPU minutes; each corpus's held-out retrieval and WordNet's (does the model
    forget?) beside the base model and BM25, and the goal checks."""
    from neoembed.bench import adapt as bench_adapt

    _echo_report(bench_adapt.run(settings))


@app.command("scale")
@options_from(ScaleBench)
def scale(settings: ScaleBench) -> None:
    """1 rank vs N ranks (torchrun, gloo): build-data's teacher encoding, pretrain and contrastive throughput
    per rank, and what the extra ranks cost."""
    from neoembed.bench import scale as bench_scale

    _echo_report(bench_scale.run(settings))
