"""A unit's face: its public names, written once as ordinary imports that every tool can follow, loaded lazily.

Each subpackage's `__init__.py` lists its public names as `from .module import name as name` under
`if TYPE_CHECKING:` and ends with `__getattr__, __dir__, __all__ = attach_face(__name__, __file__)`. Type
checkers, IDEs and import-graph tools read those imports as they are; at run time nothing under the block runs,
and `attach_face` hands the same names to `lazy_loader.attach`, which imports a module the first time one of its
names is used, so importing a face stays cheap (the CLI binds its options without loading torch).

lazy_loader's own `attach_stub` reads the names from a separate `.pyi` stub, which tools that read only `.py`
files do not follow; transformers declares them twice (a TYPE_CHECKING block and an import-structure dict).
Reading the block itself keeps one declaration in the one file every tool reads.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lazy_loader


def face_imports(init_file: str | Path) -> tuple[list[str], dict[str, list[str]]]:
    """The submodules (`from . import module as module`) and the names per module (`from .module import
    name as name`) of the `if TYPE_CHECKING:` block of a package's `__init__.py`."""
    tree = ast.parse(Path(init_file).read_text())
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    if len(blocks) != 1:
        raise ValueError(f"{init_file}: a face declares its public names in one `if TYPE_CHECKING:` block")
    submodules, names = [], {}
    for node in blocks[0].body:
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            raise ValueError(
                f"{init_file}:{node.lineno}: only `from .module import name as name` belongs here"
            )
        if node.module is None:
            submodules += [alias.name for alias in node.names]
        else:
            names.setdefault(node.module, []).extend(alias.name for alias in node.names)
    return submodules, names


def attach_face(package: str, init_file: str):
    """`__getattr__, __dir__, __all__` for the package `package` whose `__init__.py` is `init_file`."""
    submodules, names = face_imports(init_file)
    return lazy_loader.attach(package, submodules=submodules, submod_attrs=names)
