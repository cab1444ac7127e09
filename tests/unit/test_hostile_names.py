"""Names from schemas and pipeline files are data: quoted in every statement, never part of it.

Pure checks of the quoting and the table-name rule. With Spark, tests/integration/
test_hostile_names.py runs a JSON stream whose schema declares fields named as below: the
decoder, the bronze table's DDL, its evolution and the append must keep each one a single
column, with its value, and create nothing else.
"""

from __future__ import annotations

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.core.sql import check_table_name, quote, quote_table, sql_string

# Each would end its identifier in unquoted or naively quoted DDL: a second column, a comment.
BREAKOUT = "evil` string, `injected"
SPACED = "a`b c"
DOTTED = "dotted.name"
EVENT_TIME = "event `time`"


def test_quote_keeps_any_name_one_identifier():
    assert quote("plain") == "`plain`"
    assert quote(BREAKOUT) == "`evil`` string, ``injected`"
    assert quote("`") == "````"
    assert sql_string("it's \\ fine") == "'it\\'s \\\\ fine'"


@pytest.mark.parametrize("name", ["bronze.ev`ents", "bronze.events; drop table bronze.purchases", "events",
                                  "a.b.c.d", "bronze.", ".events", "bronze.1events", "bronze.my events",
                                  "bronze.events--", "bronze.ev'ents", ""])
def test_a_table_name_that_is_not_plain_is_refused(name):
    with pytest.raises(LakehouseError, match=r"^invalid table name .*: expected namespace\.table"):
        check_table_name(name)
    with pytest.raises(LakehouseError):
        quote_table(name)


@pytest.mark.parametrize("name, quoted", [("bronze.events", "`bronze`.`events`"),
                                          ("lakehouse.bronze.e_2", "`lakehouse`.`bronze`.`e_2`")])
def test_a_plain_table_name_is_quoted_part_by_part(name, quoted):
    assert quote_table(name) == quoted
