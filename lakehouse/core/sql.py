"""Names and literals written into Spark SQL text.

Whatever comes from a schema (field names) or a configuration file (table names, stream names)
is data, and must not change the statement it lands in: a field named ``a` int, b`` would
otherwise close its identifier and add a column of its own. So every identifier is quoted
(``quote``: backticks, a backtick inside doubled, as Spark's parser reads it), every string
literal escaped (``sql_string``), and table names are checked against a plain form before use
(``check_table_name``): a name is a place in the catalog, shared with dbt and other readers,
where odd characters are a mistake far more often than a wish.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from lakehouse.core.errors import LakehouseError

# A part of a table name: what Spark, Iceberg's catalogs, dbt and the shell all take unquoted.
NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TABLE_NAME_RULE = ("namespace.table (or catalog.namespace.table), each part letters, digits and "
                   "underscores, not starting with a digit")


def quote(name: str) -> str:
    """An identifier quoted for Spark SQL: any name, a backtick in it included, stays one name."""
    return "`" + name.replace("`", "``") + "`"


def check_table_name(name: str) -> str:
    """The table name if it is plain (``TABLE_NAME_RULE``); else a LakehouseError naming the rule."""
    parts = name.split(".") if isinstance(name, str) else []
    if not 2 <= len(parts) <= 3 or not all(NAME_PART.fullmatch(part) for part in parts):
        raise LakehouseError(f"invalid table name {name!r}: expected {TABLE_NAME_RULE}")
    return name


def quote_table(name: str) -> str:
    """A checked table name, each part quoted: ``bronze.purchases`` -> ```bronze`.`purchases```."""
    return ".".join(quote(part) for part in check_table_name(name).split("."))


def sql_string(text: str) -> str:
    """A Spark SQL string literal (Spark reads backslash escapes; '' would be two literals)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def timestamp_sql(at: datetime) -> str:
    """A Spark SQL timestamp literal of an aware datetime."""
    return f"timestamp'{at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"
