"""The demo's CDC models are what `lakehouse cdc add`'s templates render for its two streams
(lakehouse/commands/cdc_models): byte for byte, so neither can change without the other."""

import difflib

import pytest

from lakehouse.commands import cdc_models


@pytest.mark.parametrize("path, rendered", sorted(cdc_models.demo_models().items()))
def test_each_demo_cdc_model_is_its_rendered_template(path, rendered):
    written = (cdc_models.REPO / path).read_text()
    diff = "".join(difflib.unified_diff(written.splitlines(True), rendered.splitlines(True), path, "rendered"))
    assert written == rendered, f"run `python -m lakehouse.commands.cdc_models` to write it again:\n{diff}"


def test_the_demo_renders_every_cdc_model_of_both_streams():
    assert sorted(cdc_models.demo_models()) == sorted(
        f"models/silver/{stream}{suffix}.sql" for stream in ("customers", "accounts")
        for suffix in ("", "_changelog", "_mirror", "_history"))


def _changelog(spec: cdc_models.CdcStream) -> str:
    return cdc_models.render(spec)[f"models/silver/{spec.stream}_changelog.sql"]


def test_a_dms_changelog_ends_an_updated_composite_key_when_any_of_its_columns_changed():
    """DMS sends an update of the key as one change (Debezium: a delete and an insert): the
    changelog splits it where any key column differs from the before-image's, the `or`s in
    parentheses (an `and` binds first)."""
    spec = cdc_models.CdcStream("lines", "lines", "AWS DMS", "dms", ("order id", "line_no"),
                                (cdc_models.Column("order id"), cdc_models.Column("line_no"),
                                 cdc_models.Column("qty", cast="int")), "Written by a test.")
    text = _changelog(spec)
    assert ("coalesce(op = 'U' and ({{ own.before_key }}.`order id` <> `order id` or "
            "{{ own.before_key }}.`line_no` <> `line_no`), false) as _changes_key") in text
    assert "case when _ends_key then {{ own.before_key }}.`order id` else `order id` end as `order id`," in text
    assert "case when not _ends_key then `qty` end as `qty`," in text
    assert "cast(`qty` as int) as `qty`," in text
    assert "own.unavailable" not in text and "truncate_when" not in cdc_models.render(spec)[
        "models/silver/lines_history.sql"]


def test_a_debezium_changelog_names_the_unavailable_columns_as_it_renames_them():
    spec = cdc_models.CdcStream("people", "people", "Debezium", "debezium", ("id",),
                                (cdc_models.Column("id"), cdc_models.Column("it's", silver_name="its")),
                                "Written by a test.", quoted=False)
    text = _changelog(spec)
    assert "it's as its," in text
    assert "when 'it\\'s' then 'its'" in text and "else field end) as {{ own.unavailable }}" in text
    assert "_changes_key" not in text
