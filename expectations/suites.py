"""Data quality suites of the lakehouse, as plain data.

A suite is a :class:`SuiteSpec`: which table of which layer and stream it checks, and a list
of :class:`ExpectationSpec` (a Great Expectations expectation type, its arguments and a
severity). Adding checks for another table or stream means adding an entry to ``SUITES``;
:mod:`expectations.runner` turns the entries into GX objects and runs them.

The specs deliberately do not import Great Expectations (importing it takes seconds), so
listing or selecting suites, e.g. for ``--help`` or argument validation, stays instant.
:func:`build_gx_suite` is the one place that converts a spec into a GX ``ExpectationSuite``.

Severity:
    ``critical``  a failure fails the quality run (``QualityReport.passed`` is False);
    ``warning``   a failure is reported but does not fail the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.config import NAMESPACES
from lakehouse.errors import LakehouseError

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

Severity = Literal["critical", "warning"]
CRITICAL: Severity = "critical"
WARNING: Severity = "warning"
SEVERITIES: tuple[Severity, ...] = (CRITICAL, WARNING)

# The key of an expectation's ``meta`` that holds its severity (the source of truth for the
# runner; GX's own ``severity`` field is set to the same value so Data Docs show it too).
SEVERITY_META_KEY = "severity"


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
        column = self.kwargs.get("column")
        return str(column) if column is not None else None


@dataclass(frozen=True)
class SuiteSpec:
    """The expectations of one table. The suite is named after its table."""

    layer: str
    stream: str
    table: str  # `<namespace>.<table>` in the lakehouse catalog, as passed to spark.table()
    expectations: tuple[ExpectationSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.layer not in NAMESPACES:
            raise ValueError(f"layer must be one of {NAMESPACES}, got {self.layer!r}")
        if not self.table.startswith(self.layer + "."):
            raise ValueError(f"table {self.table!r} is not in the {self.layer} namespace")
        if not self.expectations:
            raise ValueError(f"suite {self.table} has no expectations")

    @property
    def name(self) -> str:
        return self.table


# Small constructors so the suites below read as a list of rules.

def not_null(column: str, severity: Severity = CRITICAL) -> ExpectationSpec:
    return ExpectationSpec("expect_column_values_to_not_be_null", {"column": column}, severity)


def unique(column: str, severity: Severity = CRITICAL) -> ExpectationSpec:
    # GX counts every row of a duplicated value as unexpected (two rows share an id: 2).
    return ExpectationSpec("expect_column_values_to_be_unique", {"column": column}, severity)


def in_set(column: str, values: tuple[str, ...] | frozenset[str], severity: Severity = CRITICAL
           ) -> ExpectationSpec:
    # Sorted: a stable value_set keeps the stored suite (and its expectation ids) unchanged
    # between runs. Nulls are not checked here (GX ignores them); pair with not_null.
    return ExpectationSpec("expect_column_values_to_be_in_set",
                           {"column": column, "value_set": sorted(values)}, severity)


USER_EVENT_TYPES = frozenset({"page_view", "search", "add_to_cart", "checkout", "login", "logout"})

SUITES: tuple[SuiteSpec, ...] = (
    SuiteSpec(
        layer="silver",
        stream="user_events",
        table="silver.user_events",
        expectations=(
            not_null("event_id"),
            unique("event_id"),
            not_null("event_type"),
            in_set("event_type", USER_EVENT_TYPES),
            not_null("event_at"),
            # Anonymous traffic is possible upstream: worth knowing about, not worth failing for.
            not_null("customer_id", WARNING),
        ),
    ),
)


def select_suites(layer: str | None = None, stream: str | None = None,
                  suites: Sequence[SuiteSpec] = SUITES) -> list[SuiteSpec]:
    """The suites of a layer and/or stream (None: any).

    Raises LakehouseError when nothing matches: an empty selection would otherwise "pass"
    without checking anything.
    """
    if layer is not None and layer not in NAMESPACES:
        raise LakehouseError(f"unknown layer {layer!r}: expected one of {', '.join(NAMESPACES)}")
    selected = [s for s in suites
                if (layer is None or s.layer == layer) and (stream is None or s.stream == stream)]
    if not selected:
        known = ", ".join(f"{s.name} (layer {s.layer}, stream {s.stream})" for s in suites) or "none"
        wanted = " and ".join(f"{k} {v!r}" for k, v in (("layer", layer), ("stream", stream)) if v)
        raise LakehouseError(f"no quality suite for {wanted}; defined suites: {known}")
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
