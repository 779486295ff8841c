"""Every recipe field in the recipe verbs' help, `neoembed recipes [show|diff]`, and unknown fields' nearest names."""

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.cli.recipe_fields import field_help, type_text
from neoembed.cli.recipes import RECIPE_VERBS
from neoembed.contrastive import ContrastiveSettings
from neoembed.packaged import recipe_names
from neoembed.recipes import RecipeError, describe_validation_error, load_recipe

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # one table row per line, so a row can be read back whole


def help_rows(output: str) -> dict[str, list[str]]:
    """`--path` -> [type, value, meaning] from the field tables of a --help output."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) == 4 and cells[0].startswith("--"):
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("verb", sorted(RECIPE_VERBS))
def test_every_recipe_field_has_a_meaning_and_appears_in_the_help(verb):
    settings_cls = RECIPE_VERBS[verb]
    rows = [row for section in field_help(settings_cls, None).values() for row in section]
    assert all(row.meaning for row in rows), [row.path for row in rows if not row.meaning]
    result = runner.invoke(app, [verb, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    shown = help_rows(result.output)
    assert {f"--{row.path}" for row in rows} <= set(shown), "a field is missing from the help"
    assert len(rows) > 25


def test_the_help_shows_each_fields_value_in_the_chosen_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no `neoembed pretrain` output here
    # contrastive-cpu sets loss.temperature 0.05 (the settings' default is 0.07) and leaves symmetric alone.
    result = runner.invoke(app, ["contrastive", "--recipe", "contrastive-cpu", "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "Values from recipe contrastive-cpu" in result.output
    rows = help_rows(result.output)
    assert rows["--loss.temperature"][:2] == ["float", "0.05"]
    assert rows["--loss.symmetric"][:2] == ["bool", "false"]
    assert rows["--train.precision"][0] == "{auto,fp32,bf16}"
    assert rows["--optim.betas"][1] == "[0.9, 0.95]"
    assert rows["--model.lora.r"][1] == "16", "an unset optional section shows what setting it gives"
    assert rows["--data.path"][1] == "runs/data/wordnet-manpages"
    # Without --recipe: the recipe the command would choose here, named.
    bare = runner.invoke(app, ["contrastive", "--help"], env=WIDE).output
    assert "Values from recipe contrastive-cpu" in bare
    assert help_rows(bare)["--loss.temperature"][1] == "0.05"


def test_the_help_groups_fields_by_section():
    sections = field_help(RECIPE_VERBS["glue"], None)
    assert list(sections)[:1] == ["general"]  # top-level fields (tasks, max_length, ...)
    assert {"grid", "transfer", "optim", "train"} <= set(sections)
    assert all(row.path.startswith(f"{name}.") for name in ("optim", "train") for row in sections[name])


def test_type_text_reads_as_a_user_writes_values():
    fields = ContrastiveSettings.model_fields
    assert (
        type_text(fields["model"].annotation.model_fields["pooling"].annotation) == "{mean,cls,max,lasttoken}"
    )
    assert type_text(fields["data"].annotation.model_fields["sources"].annotation) == "list[str] | null"
    assert type_text(fields["model"].annotation.model_fields["lora"].annotation) == "section | null"


def test_recipes_lists_every_packaged_recipe_with_its_verb_and_a_line():
    result = runner.invoke(app, ["recipes"], env=WIDE)
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[0].strip(): line for line in result.output.splitlines() if "│" in line}
    assert set(recipe_names()) <= set(lines)
    assert "contrastive" in lines["contrastive-cpu"] and "minutes on CPU" in lines["contrastive-cpu"]
    assert "pretrain" in lines["neobert-stage1"] and "glue" in lines["glue"]


def test_recipes_show_prints_the_recipe_with_its_launch_commands():
    result = runner.invoke(app, ["recipes", "show", "neobert-stage1"])
    assert result.exit_code == 0, result.output
    assert (
        "torchrun --nproc_per_node 8 -m neoembed pretrain --recipe recipes/neobert-stage1.yaml"
        in result.output
    )
    assert "max_length: 1024" in result.output


@pytest.mark.parametrize("name", recipe_names())
def test_every_packaged_recipe_opens_with_a_line_and_a_launch_command(name):
    shown = runner.invoke(app, ["recipes", "show", name]).output.splitlines()
    assert shown[0].startswith("# ") and "neoembed" in shown[1], "line 2 is how to launch it"


def test_recipes_show_of_an_unknown_name_lists_the_known_ones():
    result = runner.invoke(app, ["recipes", "show", "contrastive-gpu"])
    assert result.exit_code == 2
    assert "contrastive-gpu" in result.output
    assert all(name in result.output for name in recipe_names())


def test_recipes_diff_shows_only_the_fields_that_differ():
    result = runner.invoke(app, ["recipes", "diff", "neobert-stage1", "neobert-stage2"], env=WIDE)
    assert result.exit_code == 0, result.output
    rows = {
        line.split("│")[0].strip(): [c.strip() for c in line.split("│")[1:]]
        for line in result.output.splitlines()
        if "│" in line
    }
    assert rows["data.max_length"] == ["1024", "4096"]
    assert rows["model.init_from"] == ["null", "runs/neobert-stage1/final"]
    assert "data.mask_rate" not in rows, "both set 0.2"
    same = runner.invoke(app, ["recipes", "diff", "glue", "glue"])
    assert same.exit_code == 0 and "alike" in same.output
    mixed = runner.invoke(app, ["recipes", "diff", "glue", "pretrain-cpu"])
    assert mixed.exit_code == 2 and "glue recipe" in mixed.output


def test_an_unknown_field_names_the_nearest_valid_ones(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data: {path: d}\nloss: {temprature: 0.1}\nmodel: {lora: {rank: 4}}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(recipe, ContrastiveSettings)
    assert "loss.temprature: unknown field (did you mean: temperature?)" in err.value.message
    # Nothing near: every valid name of the section (here an optional section's).
    assert "model.lora.rank: unknown field (valid: r, alpha, dropout, target_modules)" in err.value.message
    result = runner.invoke(
        app, ["contrastive", "--recipe", "contrastive-cpu", "--eval.sets", "[{kind: wordnet, nam: x}]"]
    )
    assert result.exit_code == 2
    assert "eval.sets.0.nam: unknown field (did you mean: name?)" in result.output


def test_without_the_settings_class_an_unknown_field_is_reported_as_before():
    with pytest.raises(ValidationError) as err:
        ContrastiveSettings.model_validate({"data": {"path": "d"}, "loss": {"temprature": 1}})
    assert describe_validation_error(err.value) == "field loss.temprature: unknown field"
