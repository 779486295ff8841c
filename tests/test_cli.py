"""The command line: listed verbs, info and encode (the quickstart has tests/test_quickstart.py)."""

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from neoembed.cli import app

runner = CliRunner()


def test_help_lists_the_working_verbs():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("info", "encode", "quickstart", "bench"):
        assert verb in result.output


def test_info_reports_versions_device_and_backends():
    result = runner.invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    assert "torch" in result.output and "transformers" in result.output
    assert "unpadded: sdpa per sequence" in result.output
    assert "neoembed[gpu]" in result.output
    # the machine, named well enough to quote a figure from it: its flags and measured speed
    assert "cpu flags" in result.output and "M steps/s (one core)" in result.output
    assert re.search(r"float32 matmul\s*│\s*\d+ GFLOP/s", result.output)


def test_encode_prints_similarities_and_saves_embeddings(tmp_path, cpu_bf16):
    out = tmp_path / "emb.npy"
    texts = ["a dog runs in the park", "a puppy is running on grass", "interest rates rose again"]
    result = runner.invoke(app, ["encode", *texts, "--output", str(out)])  # --dtype auto
    assert result.exit_code == 0, result.output
    assert f"({'bfloat16' if cpu_bf16 else 'float32'}): 3 texts -> 384-dim" in result.output
    embeddings = np.load(out)
    assert embeddings.shape == (3, 384)
    # normalised in fp32 after the encoder's output is cast up, in either dtype
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)
    scores = embeddings @ embeddings.T
    assert scores[0, 1] > scores[0, 2] + 0.3, "the real MiniLM puts the two dog sentences together"


def test_encode_rejects_an_unloadable_model(tmp_path):
    result = runner.invoke(app, ["encode", "hello", "--model", str(tmp_path / "missing")])
    assert result.exit_code != 0
    assert "cannot load embedder" in result.output


def test_encode_checks_its_files_before_any_work(tmp_path):
    bad_output = runner.invoke(app, ["encode", "hello", "--output", str(tmp_path / "emb.csv")])
    assert bad_output.exit_code != 0 and ".npy or .jsonl" in bad_output.output
    latin1 = tmp_path / "texts.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1"))
    bad_file = runner.invoke(app, ["encode", "--file", str(latin1)])
    assert bad_file.exit_code != 0 and "not UTF-8" in bad_file.output


def test_bad_input_exits_2_with_one_line_naming_the_verb_and_no_traceback():
    result = runner.invoke(app, ["pretrain", "--recipe", "no-such-recipe"])
    assert result.exit_code == 2
    assert (
        "neoembed pretrain: recipe 'no-such-recipe' is neither a file nor a packaged recipe" in result.output
    )
    assert "pretrain-cpu" in result.output and "neobert-stage1" in result.output  # the names to choose from
    assert "Traceback" not in result.output


def test_a_failed_run_exits_1_and_debug_shows_the_traceback(monkeypatch, tmp_path):
    import neoembed.quickstart
    from neoembed.quickstart.steps import StepFailed

    def fail(*args, **kwargs):
        raise StepFailed("step 2 (pretrain) failed: disk full")

    monkeypatch.setattr(neoembed.quickstart, "run_quickstart", fail)
    result = runner.invoke(app, ["quickstart", "--run-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "neoembed quickstart: step 2 (pretrain) failed: disk full" in result.output
    assert "Traceback" not in result.output

    debug = runner.invoke(app, ["--debug", "quickstart", "--run-dir", str(tmp_path)])
    assert debug.exit_code == 1
    assert "Traceback (most recent call last)" in debug.output and "in fail" in debug.output
    assert "neoembed quickstart: step 2 (pretrain) failed: disk full" in debug.output


def test_errors_of_a_subcommand_name_the_whole_verb(tmp_path):
    result = runner.invoke(
        app, ["index", "export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.parquet")]
    )
    assert result.exit_code == 2
    assert "neoembed index export: " in result.output and "not an index directory" in result.output


def shown_default(field, option):
    """The option's default for a settings field: the field's, but None for a `bool | "auto"` field, a flag pair
    (`--compile/--no-compile`) left out for auto."""
    return None if option.is_flag and field.default == "auto" else field.default


def test_serve_options_are_generated_from_the_settings_fields():
    """Each ServeSettings field is one option whose default and help are the field's own."""
    from typer.main import get_command

    from neoembed.serve import ServeSettings

    options = {param.name: param for param in get_command(app).commands["serve"].params}
    assert set(options) == set(ServeSettings.model_fields)
    for name, field in ServeSettings.model_fields.items():
        assert f"--{name.replace('_', '-')}" in options[name].opts
        assert options[name].default == shown_default(field, options[name]), name
        assert field.description and field.description in options[name].help, name
    assert "[0<=x<=65535]" in options["port"].help  # bounds come from the field's constraints
    assert options["compile"].secondary_opts == ["--no-compile"]
    assert "One of: auto, float32, float16, bfloat16." in options["dtype"].help


def test_build_data_validates_its_options_through_the_settings(tmp_path):
    result = runner.invoke(app, ["build-data", "--check", "--teacher-dtype", "float16"])
    assert result.exit_code == 2
    assert (
        "neoembed build-data: --teacher-dtype must be one of 'auto', 'float32' or 'bfloat16', got 'float16'"
        in (result.output)
    )
    result = runner.invoke(app, ["build-data", "--out", str(tmp_path), "--margin", "1.5"])
    assert result.exit_code == 2 and "--margin: Input should be less than or equal to 1" in result.output
    checked = runner.invoke(app, ["build-data", "--check"])  # the packaged manifests, from any directory
    assert checked.exit_code == 0 and "1 manifest(s) valid: wordnet" in checked.output


def test_recipes_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    from neoembed.packaged import recipe_names, resolve_recipe

    monkeypatch.chdir(tmp_path)
    assert {"pretrain-cpu", "contrastive-cpu", "glue", "neobert-stage1", "neobert-stage2"} <= set(
        recipe_names()
    )
    for value in ("pretrain-cpu", "pretrain-cpu.yaml", "recipes/pretrain-cpu.yaml"):
        assert resolve_recipe(value).read_text().startswith("# A small NeoBERT")
    own = tmp_path / "pretrain-cpu.yaml"
    own.write_text("corpus: {wordnet: true}\n")
    assert resolve_recipe("pretrain-cpu.yaml") == own.relative_to(tmp_path)  # a file of that name wins


def test_a_recipe_names_the_shipped_deepspeed_config_from_any_directory(tmp_path, monkeypatch):
    from neoembed.packaged import recipes_dir
    from neoembed.pretrain.settings import PretrainSettings
    from neoembed.recipes import RecipeError, load_recipe
    from neoembed.training import TrainSettings

    monkeypatch.chdir(tmp_path)  # no recipes/ folder here
    shipped = str(recipes_dir() / "deepspeed-zero2.json")
    assert TrainSettings(deepspeed="recipes/deepspeed-zero2.json").deepspeed == shipped
    assert TrainSettings(deepspeed="deepspeed-zero2.json").deepspeed == shipped
    own = tmp_path / "ds.json"
    own.write_text("{}")
    assert TrainSettings(deepspeed=str(own)).deepspeed == str(own)
    with pytest.raises(RecipeError, match=r"train\.deepspeed.*missing\.json.*deepspeed-zero2\.json"):
        load_recipe(
            recipes_dir() / "pretrain-cpu.yaml", PretrainSettings, {"train.deepspeed": "missing.json"}
        )


def _options(*verb):
    from typer.main import get_command

    command = get_command(app)
    for name in verb:
        command = command.commands[name]
    return {param.name: param for param in command.params}


@pytest.mark.parametrize(
    ("verb", "settings_path", "own", "library_only"),
    [
        (("encode",), "neoembed.cli.encode_files.EncodeSettings", {"texts"}, set()),
        (("search",), "neoembed.index.SearchSettings", {"query", "index", "as_json"}, {"mmap"}),
        (("index", "build"), "neoembed.index.BuildSettings", {"corpus", "out"}, {"seed"}),
        (("index", "add"), "neoembed.index.AddSettings", {"index", "corpus"}, {"seed"}),
        (("index", "rebuild"), "neoembed.index.RebuildSettings", {"index"}, {"seed"}),
        (("index", "export"), "neoembed.index.ExportSettings", {"index", "out"}, set()),
        (("quickstart",), "neoembed.quickstart.QuickstartSettings", set(), set()),
    ],
)
def test_verbs_take_their_options_from_their_settings(verb, settings_path, own, library_only):
    import importlib

    module, name = settings_path.rsplit(".", 1)
    settings = getattr(importlib.import_module(module), name)
    options = _options(*verb)
    assert set(options) == (set(settings.model_fields) - library_only) | own
    for field_name in set(settings.model_fields) - library_only:
        field, option = settings.model_fields[field_name], options[field_name]
        assert str(option.default) == str(shown_default(field, option)), field_name  # a path: text
        assert field.description and field.description in option.help, field_name


def test_the_flags_users_know_keep_their_names():
    assert {"-k", "--k"} <= set(_options("search")["k"].opts)
    assert _options("search")["as_json"].opts == ["--json"]
    assert _options("index", "build")["corpus"].multiple
    for name in ("memory_gb", "tune_queries", "id_field", "text_field", "threads", "model"):
        assert f"--{name.replace('_', '-')}" in _options("index", "build")[name].opts
    assert {"--run-dir", "--smoke"} <= {o for p in _options("quickstart").values() for o in p.opts}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["index", "build", "--corpus", "c.jsonl", "--target-recall", "1.5"],
         "--target-recall: Input should be less than or equal to 1"),
        (["index", "build", "--corpus", "c.jsonl", "--metric", "dot"],
         "--metric must be one of 'cosine', 'ip' or 'l2', got 'dot'"),
        (["index", "build", "--corpus", "c.jsonl", "--threads", "0"],
         "--threads: Input should be greater than or equal to 1"),
        (["index", "add", "IDX", "--corpus", "c.jsonl", "--batch-size", "0"],
         "--batch-size: Input should be greater than or equal to 1"),
        (["index", "rebuild", "IDX", "--memory-gb", "-1"], "--memory-gb: Input should be greater than 0"),
        (["index", "rebuild", "IDX", "--tune-queries", "0"],
         "--tune-queries: Input should be greater than or equal to 1"),
        (["index", "export", "IDX", "--out", "e.csv", "--format", "csv"],
         "--format must be one of 'parquet', got 'csv'"),
        (["search", "--index", "IDX", "a query", "-k", "0"], "--k: Input should be greater than or equal to 1"),
        (["encode", "hello", "--batch-size", "0"], "--batch-size: Input should be greater than or equal to 1"),
        (["encode", "--file", "missing.txt"], "--file: missing.txt is not a file"),
        (["encode", "hello", "--output", "emb.csv"], "--output: emb.csv: use a .npy or .jsonl file"),
    ],
)  # fmt: skip
def test_a_bad_value_names_its_flag_before_any_work(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "IDX").mkdir()
    if args[:2] == ["index", "build"]:
        args = [*args, "--out", "new-index"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX"]  # nothing built, written or loaded


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["bench", "encode", "--dtypes", "auto,fp32"], "--dtypes"),
        (["bench", "encode", "--mixed", "512,16"], "--mixed"),
        (["bench", "serve", "--direct-batch-sizes", "32,0"], "--direct-batch-sizes"),
        (["bench", "build-data", "--dtypes", "float16"], "--dtypes"),
        (["bench", "pretrain", "--config", "medium"], "--config"),
        (["bench", "contrastive", "--set", "optim.lr"], "--set"),
    ],
)
def test_bench_options_come_from_its_settings_and_name_the_bad_flag(args, flag, tmp_path):
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert flag in result.output
    assert not any(tmp_path.iterdir()), "a bad flag must stop the bench before it writes anything"


def test_comma_separated_bench_options_parse_into_their_settings():
    from neoembed.bench.settings import EncodeBench, ServeBench
    from neoembed.cli.options import validate_options

    settings = validate_options(ServeBench, {"models": "minilm, ./a", "direct_batch_sizes": "32,64"}, [])
    assert settings.models == ("minilm", "./a") and settings.direct_batch_sizes == (32, 64)
    assert EncodeBench(mixed="8,64").mixed == (8, 64)
    assert EncodeBench().model_dump(mode="json")["configs"] == "tiny,full"  # what --help shows as the default


def test_a_recipe_list_field_takes_one_value_or_several_as_typed():
    from neoembed.adapt.settings import AdaptSettings
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import RecipeError, load_recipe, parse_overrides

    def typed(*args: str) -> AdaptSettings:
        return load_recipe(resolve_recipe("adapt-cpu"), AdaptSettings, parse_overrides(list(args)))

    settings = typed(
        "--corpus.eval_texts", "queries.txt", "--pairs.methods", "lead,terms", "--export.base_weights", "0.3"
    )
    assert settings.corpus.eval_texts == ["queries.txt"] and settings.pairs.methods == ["lead", "terms"]
    assert settings.export.base_weights == [0.3]
    assert typed("--pairs.methods", "[crop, lead]").pairs.methods == ["crop", "lead"]
    with pytest.raises(
        RecipeError, match="pairs.methods.1 must be one of 'crop', 'lead' or 'terms', got 'bogus'"
    ):
        typed("--pairs.methods", "lead,bogus")


@pytest.mark.faults
def test_a_missing_local_data_directory_is_refused_before_any_hub_access(tmp_path):
    result = runner.invoke(
        app, ["build-data", "--out", str(tmp_path / "out"), "--local-data", "/nonexistent"]
    )
    assert result.exit_code == 2
    assert "neoembed build-data: --local-data: no such directory: /nonexistent" in result.output
    assert not (tmp_path / "out").exists()
