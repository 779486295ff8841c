"""The layering docs/architecture.md promises, read from the code's own imports.

- Across top-level units (a subpackage or a top-level module of `neoembed`), a module imports the other unit's
  face only (`neoembed.data`, `neoembed.pretrain.neobert`, ...), and only names the face declares public.
- A unit imports only units on lower layers (LAYERS, bottom first): nothing goes up, and so no two units
  import each other.
- No modules import each other in a loop (a face's names count as imports of the modules that define them).
- NeoBERT's modeling files import only each other, so an export can carry them as remote code.
- mteb is imported after `neoembed.mteb_setup`, which points its result cache under neoembed's cache first.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from neoembed.faces import face_imports, type_checking_block

PACKAGE = Path(__file__).resolve().parents[1] / "neoembed"

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def read_layers() -> list[set[str]]:
    """Units from the bottom layer up, as docs/architecture.md's table of layers lists them (`| N | `unit`,
    `unit/` | job |`): the one source of the layers, so the document and this test cannot disagree."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## The layers") :]
    section = section[: section.index("\n## ", 3)]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.MULTILINE)
    assert [int(number) for number, _ in rows] == list(range(len(rows))), "layers numbered 0, 1, 2, ..."
    return [{name.rstrip("/") for name in re.findall(r"`([^`]+)`", units)} for _, units in rows]


# Units from the bottom layer up; a unit may import units on lower layers only.
LAYERS = read_layers()
FACE_SUBPACKAGES = ("neoembed.pretrain.neobert",)
MODELING_FILES = ("config.py", "modeling.py", "attention.py", "rope.py")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "neoembed"


def face(module: str) -> str:
    """The face through which other units reach `module`."""
    for sub in FACE_SUBPACKAGES:
        if module == sub or module.startswith(sub + "."):
            return sub
    return ".".join(module.split(".")[:2])


def layer(name: str) -> int:
    return next(i for i, units in enumerate(LAYERS) if name in units)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def imports(module: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(imported module, names, line) for every `import`/`from ... import` of neoembed in `module`."""
    found = []
    is_package = modules()[module].name == "__init__.py"
    for node in ast.walk(ast.parse(modules()[module].read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) + is_package - node.level]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] == "neoembed":
                found.append((target, tuple(a.name for a in node.names), node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, (), node.lineno) for a in node.names if a.name.split(".")[0] == "neoembed"]
    return found


@cache
def face_exports(face_module: str) -> dict[str, str]:
    """name -> defining module of a lazy face: the `if TYPE_CHECKING:` imports of its `__init__.py`, which
    `neoembed.faces.attach_face` also reads at run time. A package that is not a lazy face exports nothing here."""
    path = modules()[face_module]
    if path.name != "__init__.py" or "attach_face(__name__, __file__)" not in path.read_text():
        return {}
    submodules, names = face_imports(path)
    exported = {module: f"{face_module}.{module}" for module in submodules}
    for module, public in names.items():
        exported |= dict.fromkeys(public, f"{face_module}.{module}")
    return exported


def cross_unit_imports():
    for module in modules():
        for target, names, line in imports(module):
            if unit(target) != unit(module):
                yield module, target, names, line


def test_other_units_are_reached_through_their_faces_and_public_names_only():
    deep, private = [], []
    for module, target, names, line in cross_unit_imports():
        if target != face(target) and not module.startswith(face(target)):
            deep.append(f"{module}:{line} imports {target} (use {face(target)})")
        elif target in modules() and modules()[target].name == "__init__.py":
            face_module = importlib.import_module(target)
            public = set(
                getattr(face_module, "__all__", [n for n in dir(face_module) if not n.startswith("_")])
            )
            private += [f"{module}:{line} imports {target}.{n}" for n in names if n not in public]
    assert deep == [] and private == []


def test_no_unit_imports_a_unit_on_its_own_or_a_higher_layer():
    upward = [
        f"{module}:{line} ({unit(module)}, layer {layer(unit(module))}) imports {target} "
        f"({unit(target)}, layer {layer(unit(target))})"
        for module, target, _, line in cross_unit_imports()
        if layer(unit(target)) >= layer(unit(module))
    ]
    assert upward == []


def test_every_unit_has_a_layer():
    assert {unit(module) for module in modules()} <= set().union(*LAYERS)


def test_no_modules_import_each_other_in_a_loop():
    def edges(module: str) -> set[str]:
        lazy = range(0)  # a lazy face's TYPE_CHECKING imports: none runs when it is imported
        if face_exports(module):
            block = type_checking_block(modules()[module])
            lazy = range(block.lineno, block.end_lineno + 1)
        out = set()
        for target, names, line in imports(module):
            if line in lazy:
                continue
            exported = face_exports(target) if target in modules() else {}
            resolved = {exported[n] for n in names if n in exported}
            out |= resolved or ({target} if target in modules() else set())
        return out - {module}

    graph = {module: edges(module) for module in modules()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    loops = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                loops.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert loops == []


def test_neobert_modeling_files_import_only_each_other():
    """An export copies these files beside config.json for `trust_remote_code` loading without neoembed."""
    folder = PACKAGE / "pretrain" / "neobert"
    for name in MODELING_FILES:
        tree = ast.parse((folder / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] != "neoembed", f"{name} imports {node.module}"
            if isinstance(node, ast.ImportFrom) and node.level:
                assert f"{node.module}.py" in MODELING_FILES, f"{name} imports .{node.module}"


@pytest.mark.parametrize("module", [m for m in modules() if m != "neoembed.mteb_setup"])
def test_mteb_is_imported_after_its_setup(module):
    tree = ast.parse(modules()[module].read_text())
    first_mteb = first_setup = None
    for node in ast.walk(tree):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            if name.split(".")[0] == "mteb":
                first_mteb = min(first_mteb or node.lineno, node.lineno)
            if name == "neoembed.mteb_setup":
                first_setup = min(first_setup or node.lineno, node.lineno)
    if first_mteb is not None:
        assert first_setup is not None and first_setup < first_mteb, (
            f"{module}: mteb before neoembed.mteb_setup"
        )


def test_every_name_a_face_declares_loads_from_the_module_it_names():
    """The `if TYPE_CHECKING:` block never runs, so a misspelt name would only fail on first use."""
    faces = [m for m in modules() if face_exports(m)]
    assert len(faces) >= 10
    for face_module in faces:
        face = importlib.import_module(face_module)
        for name, defining in face_exports(face_module).items():
            loaded = getattr(face, name)
            assert loaded is getattr(importlib.import_module(defining), name, loaded), f"{face_module}.{name}"
