"""The package as a user installs it: a built wheel in a fresh virtual environment, run from an empty directory.

The environment reuses this one's installed dependencies through a `.pth` file (nothing is downloaded) and
gets neoembed only from the wheel, with `--no-deps`. PYTHONPATH is removed so the source tree stays out of
sight: recipes and manifests must come from the installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from neoembed.packaged import manifests_dir, recipe_names, recipes_dir

REPO = Path(__file__).resolve().parents[1]
REPO_FILES = ("pyproject.toml", "README.md", "neoembed", "recipes", "data_manifests")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A wheel built from a copy of the source, installed into a new environment; its paths."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in REPO_FILES:  # a copy, so the build leaves no build/ or egg-info in the checkout
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", source], check=True
    )
    (wheel,) = (root / "dist").glob("neoembed-*.whl")

    env = root / "env"
    venv.create(env, with_pip=False)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: pip must not touch the neoembed it sees through the .pth (this checkout's install).
    install = ["install", "--no-deps", "--ignore-installed", wheel]
    subprocess.run([*pip, "--python", env / "bin" / "python", *install], check=True)
    empty = root / "empty"
    empty.mkdir()
    return {"wheel": wheel, "bin": env / "bin", "cwd": empty}


def run(installed: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(installed["bin"] / args[0]), *args[1:]],
        cwd=installed["cwd"],
        env={**environment, "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_carries_every_recipe_and_manifest(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for path in [*recipes_dir().iterdir(), *manifests_dir().iterdir()]:
        assert f"neoembed/packaged/{path.parent.name}/{path.name}" in names


def test_the_installed_package_reads_its_own_recipes_and_manifests_from_an_empty_directory(installed):
    # Without PYTHONPATH the only importable neoembed is the wheel's (located here without importing it).
    where = "import importlib.util; print(importlib.util.find_spec('neoembed').origin)"
    probe = run(installed, "python", "-c", where)
    assert Path(probe.stdout.strip()).is_relative_to(installed["bin"].parent), probe.stdout + probe.stderr

    check = run(installed, "neoembed", "build-data", "--check", "--sources", "all")
    assert check.returncode == 0, check.stderr
    assert f"{len(list(manifests_dir().glob('*.yaml')))} manifest(s) valid" in check.stdout

    unknown = run(installed, "neoembed", "pretrain", "--recipe", "no-such-recipe")
    assert unknown.returncode == 2
    assert "neoembed pretrain: recipe 'no-such-recipe'" in unknown.stderr
    assert all(name in unknown.stderr for name in recipe_names())
    assert "Traceback" not in unknown.stderr


@pytest.mark.slow
def test_a_new_user_builds_data_pretrains_and_runs_the_quickstart_from_the_wheel(installed):
    data = run(installed, "neoembed", "build-data", "--out", "data", "--max-rows", "200", timeout=600)
    assert data.returncode == 0, data.stdout + data.stderr
    assert (installed["cwd"] / "data" / "stats.json").is_file()

    steps = [
        "--train.max_steps",
        "2",
        "--train.log_steps",
        "1",
        "--train.eval_steps",
        "2",
        "--train.save_steps",
        "2",
    ]
    pretrain = run(
        installed, "neoembed", "pretrain", "--recipe", "pretrain-cpu", *steps, "--train.threads", "1"
    )
    assert pretrain.returncode == 0, pretrain.stdout + pretrain.stderr
    assert (installed["cwd"] / "runs" / "pretrain-cpu" / "final" / "config.json").is_file()

    quickstart = run(installed, "neoembed", "quickstart", "--smoke", "--run-dir", "qs", timeout=1200)
    assert quickstart.returncode == 0, quickstart.stdout[-3000:] + quickstart.stderr[-3000:]
    assert (installed["cwd"] / "qs" / "summary.md").is_file()
