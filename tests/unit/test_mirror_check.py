"""The mirror-versus-source comparison compares content (per-key row digests), not counts."""

from __future__ import annotations

from decimal import Decimal

from expectations.mirror import EXAMPLES, compare, row_hash, row_hashes

SOURCE = {n: {"customer_id": n, "email": f"c{n}@example.com", "balance": Decimal(f"{n}.50")} for n in range(1, 21)}


def test_row_digests_are_equal_where_the_values_are_and_differ_where_any_value_does():
    row = {"id": 1, "name": "Ann", "amount": Decimal("1.00"), "active": True, "note": None}
    assert row_hash(row) == row_hash(dict(reversed(row.items())))  # column order is not content
    assert row_hash({**row, "amount": 1}) == row_hash({**row, "amount": 1.0}) == row_hash(row)  # as == says
    for changed in ({"name": "Anne"}, {"amount": Decimal("1.01")}, {"active": 1}, {"note": ""}, {"id": "1"}):
        assert row_hash({**row, **changed}) != row_hash(row), changed
    assert row_hash({**row, "extra": None}) != row_hash(row)
    assert row_hash({"a": "b", "c": None}) != row_hash({"a": None, "c": "b"})


def test_one_value_changed_with_the_count_equal_fails_and_names_the_key():
    mirror = {key: dict(row) for key, row in SOURCE.items()}
    mirror[7]["email"] = "someone.else@example.com"
    assert len(mirror) == len(SOURCE)  # what the count-based check compared

    check = compare("customers", row_hashes(SOURCE), row_hashes(mirror))

    assert not check.equal
    assert (check.source_rows, check.mirror_rows, check.missing, check.extra, check.different) == (20, 20, 0, 0, 1)
    assert check.first_differing == ((7, "values differ"),)
    assert check.describe() == "1 different (first keys: 7: values differ)"


def test_missing_extra_and_different_keys_are_named_first_few_in_key_order():
    mirror = {key: dict(row) for key, row in SOURCE.items() if key not in (3, 15)}
    mirror[21] = {"customer_id": 21, "email": "new@example.com", "balance": Decimal("0.00")}
    for key in (2, 9, 10, 11, 12, 13):
        mirror[key]["balance"] += 1

    check = compare("customers", row_hashes(SOURCE), row_hashes(mirror))

    assert (check.missing, check.extra, check.different) == (2, 1, 6)
    assert check.first_differing == ((2, "values differ"), (3, "missing from the mirror"), (9, "values differ"),
                                     (10, "values differ"), (11, "values differ"))
    assert len(check.first_differing) == EXAMPLES


def test_equal_content_is_equal_and_live_rows_sharing_a_key_are_not():
    assert compare("customers", row_hashes(SOURCE), row_hashes(SOURCE)).equal
    doubled = compare("customers", row_hashes(SOURCE), row_hashes(SOURCE), mirror_rows=21)
    assert (doubled.equal, doubled.duplicated, doubled.mirror_rows) == (False, 1, 21)
