"""A unit's face: its public names, written once as ordinary imports that every tool can follow, loaded lazily.

Each subpackage's `__init__.py` lists its public names as `from .module import name as name` under
`if TYPE_CHECKING:` and ends with `__getattr__, __dir__, __all__ = attach_face(__name__, __file__)`. Type
checkers, IDEs and import-graph tools read those imports as they are; at run time nothing under the block runs,
and `attach_face` hands the same names to `lazy_loader.attach`, which imports a module the first time one of its
names is used, so importing a face stays cheap (the CLI binds its options without loading torch).

lazy_loader's own `attach_stub` would read the names from a separate `.pyi` stub instead: a second file to keep
in step. Reading the block itself keeps one declaration, in the `__init__.py` every tool reads.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lazy_loader


def _is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def type_checking_block(init_file: str | Path) -> ast.If:
    """The one `if TYPE_CHECKING:` block of a package's `__init__.py`, where a face declares its names."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    blocks = [node for node in tree.body if isinstance(node, ast.If) and _is_type_checking(node.test)]
    if len(blocks) != 1 or blocks[0].orelse:
        raise ValueError(f"{init_file}: a face declares its public names in one `if TYPE_CHECKING:` block")
    return blocks[0]


def face_imports(init_file: str | Path) -> tuple[list[str], dict[str, list[str]]]:
    """The submodules (`from . import module as module`) and the names per module (`from .module import
    name as name`) of the `if TYPE_CHECKING:` block of a package's `__init__.py`. Each name is re-exported
    under its own name (lazy_loader serves it by that name), never `*`."""
    submodules: list[str] = []
    names: dict[str, list[str]] = {}
    for node in type_checking_block(init_file).body:
        aliases = getattr(node, "names", [])
        if (
            not isinstance(node, ast.ImportFrom)
            or node.level != 1
            or any(alias.name == "*" or alias.asname != alias.name for alias in aliases)
        ):
            raise ValueError(
                f"{init_file}:{node.lineno}: only `from .module import name as name` belongs here"
            )
        if node.module is None:
            submodules += [alias.name for alias in aliases]
        else:
            names.setdefault(node.module, []).extend(alias.name for alias in aliases)
    return submodules, names


def attach_face(package: str, init_file: str):
    """`__getattr__, __dir__, __all__` for the package `package` whose `__init__.py` is `init_file`."""
    submodules, names = face_imports(init_file)
    return lazy_loader.attach(package, submodules=submodules, submod_attrs=names)
