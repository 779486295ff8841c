"""scripts/gpu_wheelhouse.py, offline: which packages it fetches, at which versions, and its size verdict."""

import importlib.util
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_wheelhouse", ROOT / "scripts" / "gpu_wheelhouse.py")
wheelhouse = sys.modules["gpu_wheelhouse"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(wheelhouse)


def test_the_lock_is_read_as_canonical_names_and_pins():
    lock = wheelhouse.read_lock("# header\nPyYAML==6.0.4\n    # via x\nmteb[bm25s]==2.1  # note\n")
    assert lock == {"pyyaml": "6.0.4", "mteb": "2.1"}


def test_the_closure_stops_at_present_packages_and_follows_markers_and_extras():
    requires = {
        "fastapi": ["starlette>=1", "pydantic>=2", "typing-extensions>=4"],
        "starlette": ["anyio<5", "typing-extensions; python_version < '3.13'"],
        "pydantic": ["pydantic-core==2.5", "tomli; python_version < '3.11'"],
        "pydantic-core": [],
        "mteb": ["numpy", 'bm25s; extra == "bm25s"', 'pillow; extra == "image"'],
        "bm25s": ["numpy"],
    }
    lock = {name: "1.0" for name in [*requires, "anyio", "typing-extensions", "tomli", "numpy", "pillow"]}
    calls = []

    def requires_of(name, version):
        calls.append((name, version))
        return [Requirement(r) for r in requires[name]]

    wanted = [Requirement("fastapi"), Requirement("mteb[bm25s]")]
    missing = wheelhouse.closure(wanted, lock, {"anyio", "typing-extensions", "numpy"}, requires_of)
    assert missing == {
        n: "1.0" for n in ("bm25s", "fastapi", "mteb", "pydantic", "pydantic-core", "starlette")
    }
    assert ("anyio", "1.0") not in calls, "a present package's own needs are the image's"


def test_a_needed_package_the_lock_does_not_pin_is_an_error():
    with pytest.raises(SystemExit, match="uvicorn"):
        wheelhouse.closure([Requirement("uvicorn")], {}, set(), lambda n, v: [])


def test_the_real_roots_need_what_the_gpu_image_lacks_and_leave_out_mteb():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {r.name for r in wheelhouse.roots(project, wheelhouse.EXTRAS, wheelhouse.TOOLS)}
    assert {"datasets", "faiss-cpu", "fastapi", "uvicorn", "deepspeed", "openai"} <= names
    assert not any(name.startswith("mteb") for name in names)
    image = wheelhouse.read_names((ROOT / "scripts" / "gpu_image_packages.txt").read_text())
    assert {"torch", "transformers", "sentence-transformers", "typer"} <= image
    assert not {"datasets", "faiss-cpu", "fastapi", "uvicorn", "deepspeed", "pydantic"} & image
    lock = wheelhouse.read_lock((ROOT / "constraints.txt").read_text())
    assert all(wheelhouse.canonicalize_name(name) in lock for name in names - image - {"torch"})


@pytest.mark.parametrize(
    ("name", "installs"),
    [
        ("uvicorn-0.54.0-py3-none-any.whl", True),
        ("multiprocess-0.70.19-py312-none-any.whl", True),
        ("multiprocess-0.70.19-py311-none-any.whl", False),
        ("faiss_cpu-1.15.1-cp310-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", True),
        ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
        ("pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", False),
        ("xxhash-4.1.0-cp312-cp312-manylinux2014_aarch64.whl", False),
        ("pkg-1.0-cp312-cp312-win_amd64.whl", False),
    ],
)
def test_only_wheels_for_cpython_312_on_x86_64_linux_pass(name, installs):
    assert wheelhouse.installs_on_gpu_machine(name) is installs


def test_the_size_verdict_counts_every_wheel_against_the_limit(tmp_path):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"x" * 700_000)
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(b"x" * 400_000)
    (tmp_path / "wordnet-base_3.0_all.deb").write_bytes(b"x" * 100_000)
    (tmp_path / "notes.txt").write_bytes(b"x" * 10_000_000)
    house = wheelhouse.measure(tmp_path, limit_mib=1)
    assert house.total_bytes == 1_200_000 and not house.fits
    assert "OVER" in house.describe().splitlines()[-1]
    assert wheelhouse.measure(tmp_path, limit_mib=2).fits
