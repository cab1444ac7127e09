"""Data quality suites of the lakehouse, as plain data (ARCHITECTURE §10).

A suite is a :class:`SuiteSpec`: which layer and stream it belongs to, what it validates (a
table, or a SQL query over tables for checks that compare or aggregate), and a list of
:class:`ExpectationSpec` (a Great Expectations expectation type, its arguments and a
severity). :func:`project_suites` lists them all; :mod:`expectations.runner` turns them into
GX objects and runs them.

    bronze  one suite per stream of lakehouse/contracts/pipeline.yml (so a new stream is checked
            without code): Kafka coordinates unique, required fields present, event times in
            range, CDC operations known; one dead-letter-rate suite per stream; the dead
            letters' reason codes.
    silver  keys unique and not null, accepted values, amounts not negative; the CDC mirrors,
            their live tables (no tombstones; equal to the source database row for row, by
            per-key row digests, when the simulator's database is on this machine) and their
            histories, for the streams `lakehouse cdc add` added too (composite keys unique
            together).
    gold    grain unique, no negative amounts, no missing regions, and each table reconciled
            with the silver totals it is built from.

Which checks are dbt tests and which are here: dbt's data tests (models/*/_*.yml) gate the
build on every model's key or grain (unique, not null), the closed sets and the relationships,
and dbt keeps its unit tests and `dbt source freshness`. The key, not-null and closed-set
checks of silver and gold are here too, on purpose: the quality run measures the tables as
they are when it runs (after ingestion and dbt have moved on, or on a lakehouse dbt did not
build), with a severity, a history and a report. Only this module measures amounts, totals
reconciled with silver, dead-letter rates, bronze and the mirrors against their source
database. docs/quality.md has the table.

Thresholds and clocks are GX suite parameters (``param("name")``), filled in at run time
(:func:`expectations.runner.quality_parameters`), so the stored suites do not change from one
run to the next. An expectation whose parameter is unavailable, or a source comparison without
a CDC source database on this machine, is skipped and the report says so.

Severity:
    ``critical``  a failure fails the quality run (the command exits 1, the demo stops);
    ``warning``   a failure is reported and recorded but does not fail the run.

The specs do not import Great Expectations (importing it takes seconds), so listing or
selecting suites, e.g. for argument validation, stays instant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Literal

from expectations.history import RESULTS_TABLE
from lakehouse.contracts.bronze_columns import DEAD, GOOD, INGESTED_AT, IS_TOMBSTONE, KAFKA_COORDINATES, OP, SEQ
from lakehouse.contracts.error_codes import ERROR_CODES
from lakehouse.contracts.streams import load_pipeline
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import NAMESPACES
from lakehouse.core.spark import relation_exists
from lakehouse.core.sql import quote_table, sql_string

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite
    from pyspark.sql import SparkSession

    from lakehouse.contracts.streams import StreamSpec

Severity = Literal["critical", "warning"]
CRITICAL: Severity = "critical"
WARNING: Severity = "warning"
SEVERITIES: tuple[Severity, ...] = (CRITICAL, WARNING)

# The key of an expectation's ``meta`` that holds its severity (the source of truth for the
# runner; GX's own ``severity`` field is set to the same value so Data Docs show it too).
SEVERITY_META_KEY = "severity"
PARAMETER_KEY = "$PARAMETER"  # GX's marker for a value supplied at run time

DEAD_LETTERS_TABLE = "bronze.dead_letters"  # the view over every bronze table's dead rows (ARCHITECTURE §7)
GOOD_ROWS = GOOD  # a bronze table's decoded rows; its dead rows have a reason
REASON_CODES = tuple(ERROR_CODES)  # the closed set of ARCHITECTURE §7
CDC_OPERATIONS = ("I", "U", "D", "R", "T")  # T: a TRUNCATE of the table (Debezium, PostgreSQL)
# Touched days are those of silver rows ingested since the suite last passed, less this: a
# micro-batch stamps its rows when it starts and commits later (the dbt models' overlap window).
RECONCILE_MARGIN = timedelta(hours=1)
FULL_RECONCILIATION = "reconcile_full"  # the run parameter of `lakehouse quality run --full`


def param(name: str) -> dict[str, str]:
    """A value GX takes from the run's parameters (see expectations.runner.quality_parameters)."""
    return {PARAMETER_KEY: name}


@dataclass(frozen=True)
class ExpectationSpec:
    """One expectation: a GX expectation type (snake_case), its kwargs and a severity."""

    type: str
    kwargs: Mapping[str, Any]
    severity: Severity = CRITICAL

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if not self.type.startswith("expect_"):
            raise ValueError(f"not a GX expectation type: {self.type!r}")

    @property
    def column(self) -> str | None:
        """The column(s) checked, as one label: `a`, `a, b` (compound) or `a = b` (pair)."""
        return column_label(self.kwargs)

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(v[PARAMETER_KEY] for v in self.kwargs.values()
                     if isinstance(v, Mapping) and PARAMETER_KEY in v)


def column_label(kwargs: Mapping[str, Any]) -> str | None:
    if kwargs.get("column") is not None:
        return str(kwargs["column"])
    if kwargs.get("column_list"):
        return ", ".join(map(str, kwargs["column_list"]))
    if kwargs.get("column_A") is not None:
        return f"{kwargs['column_A']} = {kwargs['column_B']}"
    return None


@dataclass(frozen=True)
class TouchedDays:
    """The days a daily reconciliation checks unless asked for all (``lakehouse quality run --full``).

    They are the days of the rows of ``source`` (silver) that dbt runs appended since the suite
    last passed, less a margin (by ``_loaded_at``, the run that appended the row): the days the
    dbt runs since then recomputed in gold. Not by ``INGESTED_AT``: a late bronze commit
    stamped hours earlier reaches silver and gold all the same, and its day must be checked.
    A suite that has never passed (or no quality history) checks every day. The query's
    ``{gold_days}`` and ``{silver_days}`` become predicates on ``gold_column`` (a date) and
    ``silver_column`` (a timestamp; as day ranges, which prune silver's day partitions),
    ``{scope}`` a text that names the days checked.
    """

    source: str
    silver_column: str
    gold_column: str


@dataclass(frozen=True)
class SuiteSpec:
    """The expectations on one table, or on the rows of a query over tables.

    ``name`` defaults to the table. ``query`` (optional) is Spark SQL whose result is validated
    instead of the table; it may use ``{dead_letter_window_start}``, a timestamp literal, and
    with ``touched_days`` the placeholders of :class:`TouchedDays`, all filled in by
    :func:`render_query`. ``reads`` are the tables the suite needs (default: ``table``); when
    one is missing the suite is reported as a failed ``table_exists`` check instead of running.
    """

    layer: str
    stream: str
    table: str  # `<namespace>.<table>` in the lakehouse catalog, as passed to spark.table()
    expectations: tuple[ExpectationSpec, ...] = field(default_factory=tuple)
    name: str = ""
    query: str | None = None
    reads: tuple[str, ...] = ()
    touched_days: TouchedDays | None = None
    # Validated on the live table `table` compared with the stream's source database, key by
    # key (expectations.mirror.source_comparison: columns `key`, `difference`), not on the
    # table itself; skipped, and said so, when the run has no source for the stream.
    compares_with_source: bool = False

    def __post_init__(self) -> None:
        if self.layer not in NAMESPACES:
            raise ValueError(f"layer must be one of {NAMESPACES}, got {self.layer!r}")
        if not self.table.startswith(self.layer + "."):
            raise ValueError(f"table {self.table!r} is not in the {self.layer} namespace")
        if not self.expectations:
            raise ValueError(f"suite {self.name or self.table} has no expectations")
        if not self.name:
            object.__setattr__(self, "name", self.table)
        if not self.reads:
            object.__setattr__(self, "reads", (self.table,))


# Small constructors so the suites below read as a list of rules.

def expect(type_: str, severity: Severity = CRITICAL, **kwargs: Any) -> ExpectationSpec:
    return ExpectationSpec(f"expect_{type_}", kwargs, severity)


def not_null(column: str, severity: Severity = CRITICAL, **kwargs: Any) -> ExpectationSpec:
    return expect("column_values_to_not_be_null", severity, column=column, **kwargs)


def unique(column: str, severity: Severity = CRITICAL, **kwargs: Any) -> ExpectationSpec:
    # GX counts every row of a duplicated value as unexpected (two rows share an id: 2).
    return expect("column_values_to_be_unique", severity, column=column, **kwargs)


def unique_together(*columns: str, severity: Severity = CRITICAL) -> ExpectationSpec:
    return expect("compound_columns_to_be_unique", severity, column_list=list(columns))


def in_set(column: str, values: Sequence[str] | frozenset[str], severity: Severity = CRITICAL
           ) -> ExpectationSpec:
    # Sorted: a stable value_set keeps the stored suite (and its expectation ids) unchanged
    # between runs. Nulls are not checked here (GX ignores them); pair with not_null.
    return expect("column_values_to_be_in_set", severity, column=column, value_set=sorted(values))


def at_least(column: str, minimum: Any, severity: Severity = CRITICAL, **kwargs: Any) -> ExpectationSpec:
    return expect("column_values_to_be_between", severity, column=column, min_value=minimum, **kwargs)


def between(column: str, minimum: Any, maximum: Any, severity: Severity = CRITICAL) -> ExpectationSpec:
    return expect("column_values_to_be_between", severity, column=column, min_value=minimum, max_value=maximum)


# --- bronze: generated from the pipeline --------------------------------------------------------

def bronze_suites(stream: StreamSpec) -> list[SuiteSpec]:
    """The bronze suites of one stream: its table, and its dead-letter rate."""
    time_column = stream.event_time_column
    # Kafka tombstone rows of a CDC stream carry only the key, by design (ARCHITECTURE §6), and a
    # truncation (op T) no row at all.
    # A dead row (ARCHITECTURE §7) has its decoded columns null: the column checks read good rows.
    spark_rows = {"condition_parser": "spark"}
    data_rows = {"row_condition": f"{GOOD_ROWS} and not {IS_TOMBSTONE} and {OP} <> 'T'", **spark_rows} \
        if stream.is_cdc else {"row_condition": GOOD_ROWS, **spark_rows}
    key_rows = {"row_condition": f"{GOOD_ROWS} and coalesce({OP}, '') <> 'T'", **spark_rows} if stream.is_cdc \
        else {"row_condition": GOOD_ROWS, **spark_rows}
    checks = [
        # Exactly once: a Kafka record lands at most once, good or dead. Re-sent duplicates have
        # offsets of their own and are kept; silver removes them.
        unique_together(*KAFKA_COORDINATES),
        *(not_null(column, **(data_rows if column not in stream.identity_columns else key_rows))
          for column in dict.fromkeys((*stream.identity_columns, *stream.required_columns))),
        # The ingestion dead-letters event times before 2000 or more than a day ahead
        # (EVENT_TIME_OUT_OF_RANGE); this checks what landed agrees.
        between(time_column, param("event_time_floor"), param("event_time_ceiling")),
        # Late events are kept, but ones older than the silver models' re-read window are
        # worth a look: a replayed backlog, a producer clock gone wrong.
        at_least(time_column, param("oldest_expected_event_time"), WARNING),
    ]
    if stream.is_cdc:
        checks.append(in_set(OP, CDC_OPERATIONS))
    table_suite = SuiteSpec(layer="bronze", stream=stream.name, table=stream.bronze_table,
                            expectations=tuple(checks))
    rate_suite = SuiteSpec(
        layer="bronze", stream=stream.name, table=stream.bronze_table,
        name=f"{stream.bronze_table}.dead_letter_rate",
        reads=(stream.bronze_table,),
        # The share of the records that arrived in the window which could not be read: the
        # stream's dead rows. A replayed one (`lakehouse dlq replay`) is a good row now, counted
        # as such (with the replay's INGESTED_AT).
        query=f"""
            select
                count_if({DEAD}) as dead_letters,
                count(*) as records,
                count_if({GOOD}) as good_rows,
                coalesce(count_if({DEAD}) / nullif(count(*), 0), 0.0) as dead_letter_rate
            from {quote_table(stream.bronze_table)}
            where {INGESTED_AT} >= {{dead_letter_window_start}}
        """,
        expectations=(
            expect("column_max_to_be_between", WARNING, column="dead_letter_rate",
                   max_value=param("dead_letter_rate_warn")),
            expect("column_max_to_be_between", CRITICAL, column="dead_letter_rate",
                   max_value=param("dead_letter_rate_critical")),
            # Not one record of the window read: the stream is down however the rates are set
            # (a key type no record's key read as: every record dead, the mirror empty, its
            # data tests green). Critical whatever the thresholds, and none without records.
            at_least("good_rows", 1, row_condition="records > 0", condition_parser="spark"),
        ),
    )
    return [table_suite, rate_suite]


DEAD_LETTERS_SUITE = SuiteSpec(
    layer="bronze", stream="dead_letters", table=DEAD_LETTERS_TABLE,
    expectations=(
        not_null("stream"),
        not_null("error_code"),
        in_set("error_code", REASON_CODES),
        not_null("value", WARNING),  # a null value is a Kafka tombstone no stream accepts
        unique_together("topic", "partition", "offset"),
    ),
)


# --- silver ---------------------------------------------------------------------------------

USER_EVENT_TYPES = ("page_view", "search", "add_to_cart", "checkout", "login", "logout")
CURRENCIES = ("EUR", "GBP", "PLN", "SEK", "USD")
PAYMENT_METHODS = ("card", "cash", "voucher", "wallet")
ROLES = ("architect", "developer", "manager")


def cdc_suites(stream: str, key: str | Sequence[str], live_checks: Sequence[ExpectationSpec] = ()
               ) -> list[SuiteSpec]:
    """Mirror, live table and history of a CDC stream whose source table's key is `key` (a
    column, or the columns of a composite key: `lakehouse cdc add` takes either)."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    # one key: unique; several: unique together (GX skips the rows whose key columns are all
    # null, so the mirror's truncation marker is left out either way)
    key_unique = unique(keys[0]) if len(keys) == 1 else unique_together(*keys)
    # the one row without a key is the truncation marker (macros/cdc_mirror_changes.sql)
    key_rows = {"row_condition": "op <> 'T'", "condition_parser": "spark"}
    current = {"row_condition": "is_current", "condition_parser": "spark"}
    return [
        SuiteSpec(layer="silver", stream=stream, table=f"silver.{stream}_mirror", expectations=(
            *(not_null(k, **key_rows) for k in keys), key_unique,
            not_null("op"), in_set("op", CDC_OPERATIONS),
            not_null(SEQ), not_null("_is_deleted"),
        )),
        SuiteSpec(layer="silver", stream=stream, table=f"silver.{stream}", expectations=(
            *(not_null(k) for k in keys), key_unique,
            # No tombstones in the live table: a deleted row holds op D.
            expect("column_values_to_not_be_in_set", column="op", value_set=["D"]),
            *live_checks,
        )),
        # The CDC oracle: the live table equals the source table row for row (when a source is
        # given: the CDC simulator's database on this machine). Validated on the comparison
        # of per-key row digests (expectations.mirror.source_comparison), one row per key, so
        # a failure names the first differing keys; a count would miss a wrong value.
        SuiteSpec(layer="silver", stream=stream, table=f"silver.{stream}", name=f"silver.{stream}.source",
                  compares_with_source=True, expectations=(
                      expect("column_values_to_be_null", column="difference"),
                  )),
        SuiteSpec(layer="silver", stream=stream, table=f"silver.{stream}_history", expectations=(
            *(not_null(k) for k in keys), unique_together(*keys, SEQ),
            not_null("valid_from"), not_null("is_current"), in_set("op", CDC_OPERATIONS),
            # SCD2: at most one current version per key.
            unique(keys[0], **current) if len(keys) == 1
            else expect("compound_columns_to_be_unique", column_list=list(keys), **current),
        )),
    ]


SILVER_SUITES: tuple[SuiteSpec, ...] = (
    SuiteSpec(layer="silver", stream="user_events", table="silver.user_events", expectations=(
        not_null("event_id"), unique("event_id"),
        not_null("event_type"), in_set("event_type", USER_EVENT_TYPES),
        not_null("event_at"),
        # Anonymous traffic is possible upstream: worth knowing about, not worth failing for.
        not_null("customer_id", WARNING),
    )),
    SuiteSpec(layer="silver", stream="purchases", table="silver.purchases", expectations=(
        not_null("transaction_id"), unique("transaction_id"),
        not_null("customer_id"), not_null("purchased_at"),
        not_null("amount"), at_least("amount", 0), at_least("quantity", 1),
        # A new store currency or payment method is news, not an error.
        in_set("currency", CURRENCIES, WARNING), in_set("payment_method", PAYMENT_METHODS, WARNING),
    )),
    SuiteSpec(layer="silver", stream="employees", table="silver.employees", expectations=(
        not_null("employee_id"), not_null("started_at"), unique_together("employee_id", "started_at"),
        in_set("role", ROLES),
        between("age", 14, 100, WARNING),
    )),
    *cdc_suites("customers", "customer_id", (
        not_null("country_code"), in_set("tier", ("bronze", "gold", "silver")),
    )),
    *cdc_suites("accounts", "account_id", (
        not_null("balance"),
        in_set("account_type", ("checking", "credit", "savings")),
        in_set("currency", ("EUR", "GBP", "USD")), in_set("status", ("active", "closed", "frozen")),
    )),
    # The customers connector's source transactions (macros/cdc_transactions.sql): one row each,
    # and a published one has its END (its place in the commit order and its count) in bronze.
    SuiteSpec(layer="silver", stream="cdc_transactions", table="silver.cdc_transactions", expectations=(
        not_null("id"), unique("id"), not_null("published"),
        not_null("end_offset", row_condition="published", condition_parser="spark"),
        not_null("published_at", row_condition="published", condition_parser="spark"),
    )),
    SuiteSpec(layer="silver", stream="reference", table="silver.country_regions", expectations=(
        not_null("country_code"), unique("country_code"), not_null("region"),
    )),
)


# --- gold -----------------------------------------------------------------------------------

def reconciliation(stream: str, table: str, silver: str, query: str,
                   touched_days: TouchedDays | None = None) -> SuiteSpec:
    """A gold table's totals against silver's: `query` returns (measure, gold, silver) rows.

    Each row that differs gets a `mismatch` text naming the measure and both totals, so the
    failure's sample values say what is off ("revenue EUR: gold 811.00, silver 813.00").
    With `touched_days`, a daily mart is reconciled on the days recent runs recomputed only.
    """
    checked = f"""
        select *,
            case when gold <=> silver then null
                 else concat(measure, ': gold ', coalesce(string(gold), 'null'),
                             ', silver ', coalesce(string(silver), 'null')) end as mismatch
        from ({query}) as totals
    """
    return SuiteSpec(layer="gold", stream=stream, table=table, name=f"{table}.reconciliation",
                     query=checked, expectations=(expect("column_values_to_be_null", column="mismatch"),),
                     reads=(table, *silver.split()), touched_days=touched_days)


GOLD_SUITES: tuple[SuiteSpec, ...] = (
    SuiteSpec(layer="gold", stream="purchases", table="gold.sales_by_region_daily", expectations=(
        unique_together("sales_date", "region", "currency"),
        not_null("sales_date"), not_null("currency"),
        # No missing regions: every known customer's country is in the country_regions seed.
        not_null("region"),
        at_least("revenue", 0), at_least("purchase_count", 1),
    )),
    reconciliation("purchases", "gold.sales_by_region_daily", "silver.purchases", """
        with gold as (
            select currency, sum(revenue) as revenue, sum(purchase_count) as purchases
            from gold.sales_by_region_daily where {gold_days} group by currency
        ),
        silver as (
            select currency, sum(amount) as revenue, count(*) as purchases
            from silver.purchases where {silver_days} group by currency
        )
        select concat('revenue ', currency, ', {scope}') as measure,
               cast(coalesce(gold.revenue, 0) as decimal(38, 2)) as gold,
               cast(coalesce(silver.revenue, 0) as decimal(38, 2)) as silver
        from gold full outer join silver using (currency)
        union all
        select concat('purchases ', currency, ', {scope}'),
               cast(coalesce(gold.purchases, 0) as decimal(38, 2)),
               cast(coalesce(silver.purchases, 0) as decimal(38, 2))
        from gold full outer join silver using (currency)
    """, TouchedDays(source="silver.purchases", silver_column="purchased_at", gold_column="sales_date")),
    SuiteSpec(layer="gold", stream="customers", table="gold.customer_activity", expectations=(
        not_null("customer_id"), unique("customer_id"),
        at_least("total_spent", 0), at_least("event_count", 0), at_least("purchase_count", 0),
    )),
    # Totals over all customers, but cheap: silver's counts come from Iceberg's file metadata
    # (count(*) and count(column) are answered from manifests), gold is one row per customer.
    reconciliation("customers", "gold.customer_activity", "silver.purchases silver.user_events", """
        select 'purchases' as measure,
               cast(coalesce((select sum(purchase_count) from gold.customer_activity), 0) as decimal(38, 2)) as gold,
               cast((select count(*) from silver.purchases) as decimal(38, 2)) as silver
        union all
        select 'events of known customers',
               cast(coalesce((select sum(event_count) from gold.customer_activity), 0) as decimal(38, 2)),
               cast((select count(customer_id) from silver.user_events) as decimal(38, 2))
    """),
    SuiteSpec(layer="gold", stream="user_events", table="gold.events_by_type_daily", expectations=(
        unique_together("event_date", "event_type"), not_null("event_date"),
        in_set("event_type", USER_EVENT_TYPES), at_least("event_count", 1),
    )),
    # An empty sum is null where an empty count is 0: on no touched day (or an empty gold table)
    # both sides are empty, so the sums are coalesced to 0 (the purchases query above alike).
    reconciliation("user_events", "gold.events_by_type_daily", "silver.user_events", """
        select 'events, {scope}' as measure,
               cast(coalesce((select sum(event_count) from gold.events_by_type_daily where {gold_days}), 0)
                    as decimal(38, 2)) as gold,
               cast((select count(*) from silver.user_events where {silver_days}) as decimal(38, 2)) as silver
    """, TouchedDays(source="silver.user_events", silver_column="event_at", gold_column="event_date")),
    SuiteSpec(layer="gold", stream="employees", table="gold.headcount_by_team_role", expectations=(
        unique_together("team_name", "team_location", "role"), at_least("headcount", 1),
    )),
    reconciliation("employees", "gold.headcount_by_team_role", "silver.employees", """
        select 'employees per team and role' as measure,
               cast(coalesce((select sum(headcount) from gold.headcount_by_team_role), 0) as decimal(38, 2)) as gold,
               cast((select count(distinct employee_id, team_name, team_location, role)
                     from silver.employees) as decimal(38, 2)) as silver
    """),
    SuiteSpec(layer="gold", stream="accounts", table="gold.account_balance_summary", expectations=(
        unique_together("account_type", "currency", "status"), at_least("account_count", 1),
    )),
    reconciliation("accounts", "gold.account_balance_summary", "silver.accounts", """
        with gold as (
            select currency, sum(total_balance) as balance, sum(account_count) as accounts
            from gold.account_balance_summary group by currency
        ),
        silver as (
            select currency, sum(balance) as balance, count(*) as accounts
            from silver.accounts group by currency
        )
        select concat('balance ', currency) as measure,
               cast(coalesce(gold.balance, 0) as decimal(38, 2)) as gold,
               cast(coalesce(silver.balance, 0) as decimal(38, 2)) as silver
        from gold full outer join silver using (currency)
        union all
        select concat('accounts ', currency),
               cast(coalesce(gold.accounts, 0) as decimal(38, 2)),
               cast(coalesce(silver.accounts, 0) as decimal(38, 2))
        from gold full outer join silver using (currency)
    """),
)


# --- queries: placeholders filled in at run time --------------------------------------------

def render_query(spark: SparkSession, spec: SuiteSpec, parameters: Mapping[str, Any]) -> str:
    """The suite's query with its placeholders filled in (see :class:`SuiteSpec`).

    ``parameters`` are the run's (expectations.runner.quality_parameters), with
    ``reconcile_full`` true for a run that reconciles every day.
    """
    assert spec.query is not None
    window_start = parameters["dead_letter_window_start"].strftime("%Y-%m-%d %H:%M:%S.%f")
    values = {"dead_letter_window_start": f"timestamp'{window_start}+00:00'"}
    if spec.touched_days is not None:
        since = None if parameters.get(FULL_RECONCILIATION) else last_passed(spark, spec.name)
        days = None if since is None else touched_days(spark, spec.touched_days, since)
        values.update(day_predicates(spec.touched_days, days))
    return spec.query.format(**values)


def last_passed(spark: SparkSession, suite: str) -> str | None:
    """When `suite` last passed every check, less RECONCILE_MARGIN, as Spark timestamp text
    (None: never, or no quality history yet)."""

    if not relation_exists(spark, RESULTS_TABLE):
        return None
    row = spark.sql(f"""
        select cast(max(run_at) - interval {int(RECONCILE_MARGIN.total_seconds())} seconds as string)
        from (
            select run_id, max(run_at) as run_at from {RESULTS_TABLE}
            where suite = {sql_string(suite)} group by run_id having bool_and(success)
        )
    """).first()
    return row[0] if row else None


def touched_days(spark: SparkSession, scope: TouchedDays, since: str) -> list[date | None]:
    """The event days of `scope.source` rows appended since `since` (None: rows without a time).
    The literal bound prunes silver's files to the recent ones (each dbt run writes its own)."""
    rows = spark.sql(f"select distinct cast(to_date({scope.silver_column}) as string) from {scope.source} "
                     f"where _loaded_at >= timestamp'{since}'").collect()
    return sorted((date.fromisoformat(r[0]) if r[0] else None for r in rows),
                  key=lambda d: (d is None, d or date.min))


def day_predicates(scope: TouchedDays, days: list[date | None] | None) -> dict[str, str]:
    """{gold_days, silver_days, scope} for the days (None: all days)."""
    if days is None:
        return {"gold_days": "true", "silver_days": "true", "scope": "all days"}
    dated = [d for d in days if d is not None]
    gold = [f"{scope.gold_column} in ({', '.join(f'date{chr(39)}{d}{chr(39)}' for d in dated)})"] if dated else []
    silver = [f"({scope.silver_column} >= timestamp'{first} 00:00:00' and {scope.silver_column} < "
              f"timestamp'{last + timedelta(days=1)} 00:00:00')" for first, last in _ranges(dated)]
    if None in days:
        gold.append(f"{scope.gold_column} is null")
        silver.append(f"{scope.silver_column} is null")
    text = (f"touched days {dated[0]}..{dated[-1]} ({len(dated)})" if dated else "no touched day") \
        + (" and no date" if None in days else "")
    return {"gold_days": " or ".join(gold) or "false", "silver_days": " or ".join(silver) or "false",
            "scope": text}


def _ranges(days: list[date]) -> list[tuple[date, date]]:
    """Consecutive days joined: [(first, last), ...]."""
    ranges: list[list[date]] = []
    for day in sorted(set(days)):
        if ranges and ranges[-1][1] + timedelta(days=1) == day:
            ranges[-1][1] = day
        else:
            ranges.append([day, day])
    return [(first, last) for first, last in ranges]


def added_cdc_suites(streams: Sequence[StreamSpec]) -> list[SuiteSpec]:
    """The silver suites of the CDC streams SILVER_SUITES does not name (those `lakehouse cdc
    add` wrote models for), keyed on their identity: a composite key is unique together."""
    named = {suite.stream for suite in SILVER_SUITES}
    return [suite for stream in streams if stream.is_cdc and stream.name not in named
            for suite in cdc_suites(stream.name, stream.identity_columns)]


def project_suites() -> tuple[SuiteSpec, ...]:
    """Every suite of the project: bronze from the pipeline file, then silver, then gold."""
    streams = list(load_pipeline().values())
    bronze = [suite for stream in streams for suite in bronze_suites(stream)]
    return (*bronze, DEAD_LETTERS_SUITE, *SILVER_SUITES, *added_cdc_suites(streams), *GOLD_SUITES)


def select_suites(layer: str | None = None, stream: str | None = None,
                  suites: Sequence[SuiteSpec] | None = None) -> list[SuiteSpec]:
    """The suites of a layer and/or stream (None: any) among `suites` (default: the project's).

    Raises LakehouseError when nothing matches: an empty selection would otherwise "pass"
    without checking anything.
    """
    suites = project_suites() if suites is None else suites
    if layer is not None and layer not in NAMESPACES:
        raise LakehouseError(f"unknown layer {layer!r}: expected one of {', '.join(NAMESPACES)}")
    selected = [s for s in suites
                if (layer is None or s.layer == layer) and (stream is None or s.stream == stream)]
    if not selected:
        streams = sorted({s.stream for s in suites if layer is None or s.layer == layer})
        wanted = " and ".join(f"{k} {v!r}" for k, v in (("layer", layer), ("stream", stream)) if v)
        raise LakehouseError(f"no quality suite for {wanted}; streams with suites"
                             f"{' in ' + layer if layer else ''}: {', '.join(streams) or 'none'}")
    return selected


def build_gx_suite(spec: SuiteSpec) -> ExpectationSuite:
    """The GX ExpectationSuite of a spec (imports Great Expectations)."""
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
    from great_expectations.expectations.metadata_types import FailureSeverity

    expectations = [
        # ExpectationConfiguration resolves the type name through GX's registry and
        # to_domain_obj() validates the kwargs against the expectation's pydantic model.
        ExpectationConfiguration(
            type=e.type,
            kwargs=dict(e.kwargs),
            meta={SEVERITY_META_KEY: e.severity},
            severity=FailureSeverity(e.severity),  # GX's own enum has the same values
        ).to_domain_obj()
        for e in spec.expectations
    ]
    return ExpectationSuite(
        name=spec.name,
        expectations=expectations,
        meta={"layer": spec.layer, "stream": spec.stream, "table": spec.table},
    )
