"""ingestion/formats/: one module per wire format, each importable alone, and imports that point
one way: a format's module reads the shared modules, never another format's (issue 57 item 5)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "ingestion" / "formats"
WIRE_FORMATS = {"protobuf", "avro", "json_events", "debezium", "dms", "debezium_transactions"}
SHARED = {"checks", "strict_json", "changelog", "bronze_shape", "column_types"}


def _modules() -> set[str]:
    return {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}


def test_the_package_holds_the_wire_formats_and_what_they_share():
    assert _modules() == WIRE_FORMATS | SHARED
    assert not (REPO_ROOT / "ingestion" / "formats.py").exists()


@pytest.mark.parametrize("module", sorted(WIRE_FORMATS | SHARED))
def test_each_module_imports_alone(module):
    # A fresh interpreter: an import cycle, or a name another module was expected to have
    # defined first, fails here and not only in some import order.
    result = subprocess.run([sys.executable, "-c", f"import ingestion.formats.{module}"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_package_imports_nothing_else_of_ingestion():
    # imports point one way: ingestion's job and decoders use the formats, never the reverse
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ingestion"):
                assert node.module.startswith("ingestion.formats"), f"{path.name} imports {node.module}"


def _formats_imported(path: Path) -> set[str]:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ingestion.formats."):
            imported.add(node.module.rsplit(".", 1)[1])
    return imported


@pytest.mark.parametrize("module", sorted(WIRE_FORMATS | SHARED))
def test_a_format_reads_only_the_shared_modules(module):
    imported = _formats_imported(PACKAGE / f"{module}.py")
    if module in SHARED:
        # the shared modules never need a format's; strict_json names Debezium's SemanticType
        # only for type checking
        assert imported <= SHARED | ({"debezium"} if module == "strict_json" else set()), imported
    else:
        assert imported <= SHARED, f"{module} imports another wire format's module: {imported - SHARED}"
