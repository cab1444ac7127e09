"""Data quality of the lakehouse tables with Great Expectations (suites as code)."""

from expectations.runner import (
    ExpectationResult,
    QualityReport,
    SuiteResult,
    format_summary,
    run_quality,
)
from expectations.suites import SUITES, ExpectationSpec, SuiteSpec, select_suites

__all__ = [
    "SUITES",
    "ExpectationResult",
    "ExpectationSpec",
    "QualityReport",
    "SuiteResult",
    "SuiteSpec",
    "format_summary",
    "run_quality",
    "select_suites",
]
