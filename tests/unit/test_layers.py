"""The house's stairs go one way: a package imports only the floors below it.

Every import counts, the ones inside functions too: an import moved into a function to dodge
a cycle is still a cycle. The floors are those of docs/ARCHITECTURE.md ("Layers").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Lowest first. Packages on one floor are independent of each other.
FLOORS = (
    ("lakehouse.core",),
    ("lakehouse.contracts",),
    ("ingestion", "producers"),
    ("expectations",),
    ("lakehouse.operations",),  # the dbt runner gates publication on the quality checks
    ("lakehouse.commands",),
)
PACKAGES = [package for floor in FLOORS for package in floor]
FLOOR = {package: number for number, floor in enumerate(FLOORS) for package in floor}


def package_of(module: str) -> str | None:
    """The floor package a dotted module name belongs to (None: not the project's)."""
    matches = [p for p in PACKAGES if module == p or module.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a project module in the file, at any depth."""
    found = []
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = module.split(".")[: -node.level]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            # `from lakehouse import core` imports lakehouse.core
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if package_of(name) or name.split(".")[0] in
            ("lakehouse", "ingestion", "producers", "expectations")]


def project_files() -> list[Path]:
    files = []
    for top in ("lakehouse", "ingestion", "producers", "expectations"):
        files += sorted((ROOT / top).rglob("*.py"))
    return [f for f in files if "generated" not in f.parts]


def violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        here = package_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for line, name in project_imports(path):
            there = package_of(name)
            if here is None:
                # lakehouse/__init__.py: the house's sign, which imports nothing of it
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name} (only the floors may import)")
            elif there is None:
                if name.split(".")[0] != "lakehouse" or name.rsplit(".", 1)[0] != "lakehouse":
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {name}, which is on no floor")
            elif there != here and FLOOR[there] >= FLOOR[here]:
                found.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {name} ({there}): "
                             + ("same floor" if FLOOR[there] == FLOOR[here] else "a higher floor"))
    return found


def test_every_package_imports_only_the_floors_below_it():
    assert violations(project_files()) == []


def test_every_project_file_is_on_a_floor():
    loose = [f.relative_to(ROOT) for f in project_files()
             if package_of(".".join(f.relative_to(ROOT).with_suffix("").parts)) is None
             and f.relative_to(ROOT) not in (Path("lakehouse/__init__.py"),)]
    assert loose == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from lakehouse.commands import cli\n", "a higher floor"),  # core reaching up
    ("def later():\n    from ingestion import job\n", "a higher floor"),  # hidden in a function
    ("import producers.run\n", "a higher floor"),
])
def test_the_check_catches_an_import_up_the_stairs(tmp_path, monkeypatch, source, expected):
    module = ROOT / "lakehouse" / "core" / "_layer_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == module
                        else Path.read_bytes(self).decode())
    [problem] = violations([module])
    assert expected in problem


def test_the_check_catches_a_sibling_import(monkeypatch):
    module = ROOT / "ingestion" / "_layer_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: "from producers import faults\n" if self == module
                        else Path.read_bytes(self).decode())
    [problem] = violations([module])
    assert "same floor" in problem
