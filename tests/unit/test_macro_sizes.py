"""No dbt macro or materialization of macros/ is over 80 lines (issue 57 item 4, "Jinja you can
test"): a longer one is split into named steps, each doing one thing, so that a step that
builds SQL from its arguments can be tested on its own cases (tests/dbt_macro_steps, a dbt
unit test per case; tests/unit/test_materialization_steps.py for the materializations' steps,
which dbt unit tests cannot reach).

A block counts from the line of its opening tag to the line of its closing tag; the comment
before it is not counted."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import REPO_ROOT

LIMIT = 80
STEPS = REPO_ROOT / "tests" / "dbt_macro_steps" / "models"
# Macros allowed over the limit while they are being split: {name: why}. Empty: none may be.
ALLOWED: dict[str, str] = {}

BLOCK = re.compile(r"\{%-?\s*(macro|materialization)\s+(\w+).*?\{%-?\s*end(?:macro|materialization)\s*-?%\}",
                   re.DOTALL)


def blocks(text: str) -> list[tuple[str, str, int]]:
    """(kind, name, lines) of every macro and materialization block of a macros file."""
    return [(found.group(1), found.group(2), found.group(0).count("\n") + 1) for found in BLOCK.finditer(text)]


def sizes(folder: Path = REPO_ROOT / "macros") -> dict[str, int]:
    """{file:name: lines} of every block of the folder's .sql files."""
    return {f"{path.name}:{name}": lines for path in sorted(folder.glob("*.sql"))
            for _, name, lines in blocks(path.read_text())}


def test_no_macro_or_materialization_is_over_the_limit():
    over = {block: lines for block, lines in sizes().items()
            if lines > LIMIT and block.split(":")[1] not in ALLOWED}
    assert over == {}, f"over {LIMIT} lines; split into named steps (tests/unit/test_macro_sizes.py)"


def test_the_allow_list_names_only_blocks_over_the_limit():
    """An entry whose macro was split (or renamed) goes, so the list cannot hide a new one."""
    long = {block.split(":")[1] for block, lines in sizes().items() if lines > LIMIT}
    assert set(ALLOWED) <= long


def test_blocks_are_counted_from_tag_to_tag():
    text = ("{#- a comment of three\n lines\n-#}\n{% macro one(a) -%}\n    {{ a }}\n{%- endmacro %}\n\n"
            "{% materialization two, adapter='spark' -%}\n    {{ return({}) }}\n{%- endmaterialization %}\n"
            "{%- macro three() -%}{{ 3 }}{%- endmacro -%}\n")
    assert blocks(text) == [("macro", "one", 3), ("materialization", "two", 3), ("macro", "three", 1)]


def test_the_project_has_macros_to_count():
    assert {"cdc_mirror_changes", "cdc_history_versions"} <= {block.split(":")[1] for block in sizes()}


def test_the_steps_of_the_cdc_macros_have_cases_of_their_own():
    """Each step `cdc_history_versions` and `cdc_mirror_changes` call is called by a model of
    tests/dbt_macro_steps, and each such model has dbt unit tests (tests/integration/
    test_macro_steps.py runs them)."""
    texts = {path.name: path.read_text() for path in (REPO_ROOT / "macros").glob("*.sql")}
    bodies = {name: found.group(0) for text in texts.values() for found in BLOCK.finditer(text)
              for name in [found.group(2)]}
    steps = {step for outline in ("cdc_history_versions", "cdc_mirror_changes")
             for step in re.findall(r"\{\{\s*(cdc_\w+)\(", bodies[outline])}
    assert len(steps) >= 10  # the outlines call their steps so: `{{ step(...) }}`
    models = {path.stem: path.read_text() for path in STEPS.glob("*.sql")}
    untested = {step for step in steps if not any(f"{{{{ {step}(" in text for text in models.values())}
    assert untested == set()
    cases = {test["model"] for path in STEPS.glob("_*__unit_tests.yml")
             for test in yaml.safe_load(path.read_text())["unit_tests"]}
    assert {name for name, text in models.items() if "{{ cdc_" in text} == cases
