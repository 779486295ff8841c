"""Debian text packages as offline data: find a package's files, or unpack the package without root.

WordNet (`wordnet-base`, the embedded training source) and FOLDOC (`dict-foldoc`, the cross-source held-out
evaluation set) are real text that the Debian mirror serves to a machine with no model or dataset hub. Only
`apt-get download` and `dpkg-deb -x` are used, so no root is needed; the unpacked tree lands in the cache with
one atomic rename.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from neoembed.cache import cache_root
from neoembed.errors import RunError

SYSTEM_ROOT = Path("/")  # where an installed package's files are


class PackageDataError(RunError):
    """A Debian package's data missing and not installable; the message says where it looked and what to do."""


def package_dir(
    package: str,
    subdir: str,
    has_data: Callable[[Path], bool],
    env_var: str,
    cache_name: str,
    system: bool = True,
) -> Path:
    """The directory holding `package`'s files (`/<subdir>` in the package): $`env_var`, the system copy
    (unless `system` is False: a directory such as /usr/share/man that mixes every installed package's files),
    or the cache, filled from the Debian mirror when nothing else has the data."""
    override = os.environ.get(env_var)
    if override:
        if not has_data(Path(override)):
            raise PackageDataError(f"{env_var}={override} does not hold {package}'s files")
        return Path(override)
    installed = SYSTEM_ROOT / subdir
    if system and has_data(installed):
        return installed
    cache = cache_root() / cache_name
    if not has_data(cache):
        install_into(package, subdir, cache, has_data, env_var)
    return cache


def install_into(
    package: str, subdir: str, cache: Path, has_data: Callable[[Path], bool], env_var: str
) -> None:
    """`apt-get download <package>` + `dpkg-deb -x`, then `<subdir>` of the package renamed to `cache`."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
        try:
            subprocess.run(
                ["apt-get", "download", package], cwd=tmp, check=True, capture_output=True, text=True
            )
            (deb,) = Path(tmp).glob(f"{package}_*.deb")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(Path(tmp) / "root")], check=True)
        except (OSError, subprocess.CalledProcessError, ValueError) as err:
            detail = getattr(err, "stderr", None) or err
            raise PackageDataError(
                f"{package}'s data not found and installing Debian's {package} into {cache} failed: {detail}. "
                f"Install it (`apt-get install {package}`) or point {env_var} at a directory holding its files."
            ) from err
        extracted = Path(tmp) / "root" / subdir
        if not has_data(cache):  # another process may have finished first
            shutil.rmtree(cache, ignore_errors=True)
            extracted.rename(cache)
