"""`loss.kind` picks the loss the trainer trains: both shipped kinds, recipes written before `kind`, an unknown
kind, and a new kind (below, registered at test time) trained end to end without a change to the trainer."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from test_contrastive import tiny_encoder_dir
from test_contrastive_run import build, recipe  # noqa: F401 (build: the module's pytest fixture)

from neoembed.contrastive.losses import LOSSES, infonce
from neoembed.contrastive.losses.distill import DistillationLoss
from neoembed.contrastive.losses.infonce import InfoNCELoss
from neoembed.contrastive.settings import ContrastiveSettings
from neoembed.packaged import resolve_recipe
from neoembed.recipes import RecipeError, load_recipe


class MarginInfoNCELoss(InfoNCELoss):
    """InfoNCE with an additive margin (AM-Softmax, as LaBSE trains): the positive's cosine is lowered by
    `margin` before the softmax, so it has to beat every other candidate by at least that much.

    Settings: InfoNCE's (`loss.temperature`, `loss.symmetric` aside); the margin is fixed here.

    When to use it: where InfoNCE's positives already win but by little (near-duplicate negatives).
    """

    def __init__(self, model, margin: float = 0.1, **arguments) -> None:
        super().__init__(model, **arguments)
        self.margin = margin

    @classmethod
    def from_recipe(cls, settings, model, world_size):
        return cls(model, **infonce.infonce_arguments(settings.loss))

    def terms(self, batch, columns, keys):
        scores = batch.scores(self.scale).masked_fill(batch.duplicates(), -torch.inf)
        margin = self.margin * self.scale * F.one_hot(batch.rows, scores.shape[1])
        return {"infonce": self.weight * F.cross_entropy(scores - margin, batch.rows)}

    @property
    def config(self):
        return {**super().config, "margin": self.margin}


def test_a_new_kind_trains_end_to_end_once_registered(tmp_path, build, minilm_path, monkeypatch):  # noqa: F811
    from neoembed.contrastive.train import run_contrastive

    monkeypatch.setitem(LOSSES, "margin", f"{__name__}:MarginInfoNCELoss")
    base = tiny_encoder_dir(tmp_path, minilm_path)
    first_losses = {}
    for kind in ("infonce", "margin"):
        plan = {**recipe(build, base, tmp_path / kind), "loss": {"kind": kind}}
        result = run_contrastive(ContrastiveSettings.model_validate(plan))
        assert result.steps == 4
        logged = [json.loads(line) for line in (tmp_path / kind / "metrics.jsonl").read_text().splitlines()]
        first_losses[kind] = next(line["loss"] for line in logged if "loss" in line)
    # The same weights and batch at step 1: the margin can only raise the loss.
    assert first_losses["margin"] > first_losses["infonce"]
    card = (tmp_path / "margin" / "neobert-embed" / "README.md").read_text()
    assert "MarginInfoNCELoss" in card and '"margin": 0.1' in card
    recorded = json.loads((tmp_path / "margin" / "recipe.json").read_text())
    assert recorded["loss"]["kind"] == "margin"  # a resume with another loss is refused


@pytest.mark.parametrize(
    "loss, trained",
    [({}, InfoNCELoss), ({"kind": "distill", "distill": {"teacher": "base"}}, DistillationLoss)],
    ids=["infonce", "distill"],
)
def test_each_shipped_kind_is_the_loss_the_trainer_trains(tmp_path, build, minilm_path, loss, trained):  # noqa: F811
    from neoembed.contrastive.train import build_trainer

    base = tiny_encoder_dir(tmp_path, minilm_path)
    plan = {**recipe(build, base, tmp_path / "run"), "loss": {"temperature": 0.05, **loss}}
    trainer = build_trainer(ContrastiveSettings.model_validate(plan))
    assert type(trainer.contrastive_loss) is trained
    config = trainer.contrastive_loss.config
    assert config["temperature"] == 0.05 and config["weight"] == 1.0
    if trained is DistillationLoss:
        assert config["distill"] == {
            "teacher": "base",
            "target": "scores",
            "temperature": 0.05,
            "weight": 1.0,
        }


def test_recipes_written_before_kind_train_distillation_and_record_the_same_recipe():
    settings = load_recipe(resolve_recipe("contrastive-cpu"), ContrastiveSettings)
    assert settings.loss.trained_kind == "distill" and settings.loss.distill.teacher == "base"
    dumped = settings.model_dump(mode="json")["loss"]
    assert "kind" not in dumped  # the recipe's identity (resume, the benches' reuse) is what it was
    assert ContrastiveSettings.model_validate(settings.model_dump()).loss.trained_kind == "distill"
    assert ContrastiveSettings.model_validate({"data": {"path": "d"}}).loss.trained_kind == "infonce"
    named = ContrastiveSettings.model_validate({"data": {"path": "d"}, "loss": {"kind": "distill"}})
    assert named.loss.distill.teacher == "minilm"  # kind distill alone: the default teacher
    assert named.model_dump(mode="json")["loss"]["kind"] == "distill"


@pytest.mark.parametrize(
    "loss, error",
    [
        ({"kind": "triplet"}, "field loss.kind: unknown loss kind 'triplet'; the kinds are infonce, distill"),
        ({"kind": "infonce", "distill": {}}, "distill is for kind distill, not infonce"),
    ],
)
def test_a_loss_kind_that_cannot_train_is_named_in_one_line(tmp_path, loss, error):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"data": {"path": "d"}, "loss": loss}))
    with pytest.raises(RecipeError) as refused:
        load_recipe(path, ContrastiveSettings)
    assert error in str(refused.value) and "\n" not in str(refused.value)
    assert refused.value.param.startswith("loss")


def test_the_card_of_a_loss_outside_the_infonce_family_names_no_infonce(tmp_path, minilm_path):
    from neoembed.contrastive.model import build_model
    from neoembed.contrastive.model_card import neoembed_section, training_facts

    settings = ContrastiveSettings.model_validate({"data": {"path": "d"}})
    model = build_model(str(tiny_encoder_dir(tmp_path, minilm_path)), "mean", 24)
    facts = training_facts(settings, {"margin": 0.5}, model, {"wordnet": range(8)}, 3, None, None)
    assert facts.infonce_weight == 0.0
    section = neoembed_section(facts, {})
    assert "with the loss the training details below name" in section and "InfoNCE" not in section
