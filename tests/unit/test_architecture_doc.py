"""The design of record stays a design: short, and every test it names exists.

docs/ARCHITECTURE.md says which test keeps each invariant (`tests/.../test_x.py::test_name`). A
test renamed or removed leaves the invariant unguarded while the page still claims a guard, so
every name it cites must be a `def` of the file it names. And the page holds the contracts
between the parts, not their history or how-tos (those live in the git log and in docs/*.md):
at most MAX_LINES lines (issue 57, item 8).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
MAX_LINES = 600
CITATION = re.compile(r"\b(tests/[\w/]+\.py)::(\w+)")


def cited_tests(text: str) -> list[tuple[str, str]]:
    """(file, test name) of every `tests/...py::name` in the text, in order, without repeats."""
    return list(dict.fromkeys(CITATION.findall(text)))


def missing_tests(text: str, root: Path) -> list[str]:
    """The citations whose file does not exist or defines no function of that name."""
    missing = []
    for path, name in cited_tests(text):
        source = root / path
        if not source.is_file() or not re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\(",
                                                 source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    return missing


def test_the_design_of_record_is_at_most_600_lines():
    lines = len(ARCHITECTURE.read_text().splitlines())
    assert lines <= MAX_LINES, f"docs/ARCHITECTURE.md has {lines} lines, more than {MAX_LINES}"


def test_every_test_the_design_cites_exists():
    text = ARCHITECTURE.read_text()
    assert len(cited_tests(text)) > 50  # the invariants name their tests
    assert missing_tests(text, ROOT) == []


def test_a_citation_of_a_missing_file_or_test_is_found(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_here():\n    pass\n\ndef helper_test_gone():\n    pass\n")
    text = ("kept by `tests/test_a.py::test_here`, `tests/test_a.py::test_gone` and "
            "`tests/test_b.py::test_here`")
    assert missing_tests(text, tmp_path) == ["tests/test_a.py::test_gone", "tests/test_b.py::test_here"]
