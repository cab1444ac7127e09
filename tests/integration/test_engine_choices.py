"""Why the project keeps its own code where Spark 4.1 and Iceberg 1.12 offer a feature (issue 57
item 1, "adopt what pays"), checked on the engines the project runs, so an upgrade that changes
the answer fails here and sends the maintainer to the decision (docs/models.md, "Engine
features not adopted").

Spark 4.1's `MERGE WITH SCHEMA EVOLUTION` adds a column and widens a type in place on a table's
`main`, and refuses what is not an Iceberg widening, as macros/column_evolution.sql does. But
into a branch (`<table>.branch_<name>`, where issue 58's write-audit-publish will write silver)
the same statement fails to resolve its target on Spark 4.1.1 with Iceberg 1.12.0 (apache/iceberg
pull request #14970, which added it, notes the branch case), while a plain MERGE into the branch
works. So silver keeps `spark__sync_column_schemas`: an ALTER before the write, which works on
every branch.
"""

import uuid
from decimal import Decimal

import pytest

pytestmark = pytest.mark.integration

MERGE = ("merge {evolution} into {target} t using ({source}) s on t.id = s.id "
         "when matched then update set * when not matched then insert *")


@pytest.fixture
def table(spark):
    name = f"lake.silver.engine_choice_{uuid.uuid4().hex[:8]}"
    spark.sql(f"create table {name} (id int, quantity int, price decimal(10,2)) using iceberg")
    spark.sql(f"insert into {name} values (1, 1, 1.25)")
    yield name
    spark.sql(f"drop table if exists {name} purge")


def test_merge_with_schema_evolution_widens_on_main_as_our_macro_does(spark, table):
    spark.sql(MERGE.format(evolution="with schema evolution", target=table, source=(
        "select 2 as id, cast(3000000000 as bigint) as quantity, cast(12345678.25 as decimal(12,2)) as price, "
        "'new' as note")))
    assert spark.table(table).schema.simpleString() == \
        "struct<id:int,quantity:bigint,price:decimal(12,2),note:string>"
    rows = [tuple(row) for row in spark.table(table).orderBy("id").collect()]
    assert rows == [(1, 1, Decimal("1.25"), None), (2, 3000000000, Decimal("12345678.25"), "new")]
    with pytest.raises(Exception, match="Cannot change column type"):  # a double over a bigint: not a widening
        spark.sql(MERGE.format(evolution="with schema evolution", target=table, source=(
            "select 3 as id, cast(2.7 as double) as quantity, cast(1 as decimal(12,2)) as price, 'x' as note")))
    assert spark.table(table).count() == 2 and spark.table(table).schema["quantity"].dataType.simpleString() == "bigint"


def test_merge_with_schema_evolution_into_a_branch_fails_where_a_plain_merge_works(spark, table):
    spark.sql(f"alter table {table} create branch audit")
    branch = f"{table}.branch_audit"
    spark.sql(MERGE.format(evolution="", target=branch, source=(
        "select 2 as id, 2 as quantity, cast(2.5 as decimal(10,2)) as price")))
    assert spark.sql(f"select count(*) from {branch}").first()[0] == 2
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(MERGE.format(evolution="with schema evolution", target=branch, source=(
            "select 3 as id, 3 as quantity, cast(3.5 as decimal(10,2)) as price, 'new' as note")))
    assert "note" not in spark.table(branch).columns
