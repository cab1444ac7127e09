"""Data quality of the lakehouse tables with Great Expectations (suites as code)."""

from expectations.runner import (
    ExpectationResult,
    QualityReport,
    SuiteResult,
    format_summary,
    run_quality,
)
from expectations.suites import ExpectationSpec, SuiteSpec, project_suites, select_suites

__all__ = [
    "ExpectationResult",
    "ExpectationSpec",
    "QualityReport",
    "SuiteResult",
    "SuiteSpec",
    "format_summary",
    "project_suites",
    "run_quality",
    "select_suites",
]
