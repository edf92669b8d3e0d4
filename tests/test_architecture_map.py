"""docs/ARCHITECTURE.md's package map names every module of src/turboyolo, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "turboyolo"


def package_map() -> dict[str, set[str]]:
    """The map's code block: folder ("" for the top level) -> the words written in its entry."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("## The package", 1)[1].split("```", 2)[1]
    entries: dict[str, set[str]] = {"": set()}
    folder = ""
    for line in block.splitlines()[2:]:  # after "src/turboyolo/"
        head = re.match(r"  (\w+)/\s", line)
        if head:
            folder = head.group(1)
        elif re.match(r"  \S", line):  # a top-level entry: its .py names
            folder = ""
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?=\.py\b)", line)) if folder == "" else set()
        if folder:
            words = set(re.findall(r"\b[a-z_][a-z0-9_]*\b", line.split("#")[0]))
        entries.setdefault(folder, set()).update(words)
    return entries


def test_every_module_is_on_the_map():
    entries = package_map()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if path.name == "__init__.py" and len(parts) > 1:
            continue  # a package is on the map by its folder
        folder, name = ("", path.stem) if len(parts) == 1 else (parts[0], path.stem)
        if name not in entries.get(folder, set()):
            missing.append("/".join(parts))
    assert not missing, f"docs/ARCHITECTURE.md's package map does not name: {', '.join(missing)}"


def test_every_folder_and_top_level_file_on_the_map_exists():
    entries = package_map()
    for folder in entries:
        assert not folder or (PACKAGE / folder / "__init__.py").is_file(), f"{folder}/: not in src"
    for name in entries[""]:
        assert (PACKAGE / f"{name}.py").is_file(), f"{name}.py is on the map, not in src/turboyolo"
