"""The routes the router serves (the metrics label requests by them) are the documented ones."""

import re
from pathlib import Path

from neoembed.serve.routes import route_paths, router

DOCS = Path(__file__).resolve().parents[1] / "docs"


def documented(path: Path, section: str) -> set[tuple[str, str]]:
    """(method, path) of each `| `METHOD /path` | ... |` row in the markdown section headed `section`."""
    text = path.read_text(encoding="utf-8")
    body = text[text.index(f"## {section}\n") :].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z]+) (/[^`\s]*)` \|", body, flags=re.MULTILINE))


def test_every_route_is_documented_and_every_documented_route_exists():
    served = {(method, route.path) for route in router.routes for method in route.methods}
    assert documented(DOCS / "serve.md", "Routes") == served


def test_the_architecture_names_every_route():
    row = next(
        line for line in (DOCS / "architecture.md").read_text().splitlines() if line.startswith("| `serve/`")
    )
    named = set(re.findall(r"`(/[^`]*)`", row))
    assert named == set(route_paths())
