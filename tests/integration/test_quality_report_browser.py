"""The quality landing page opened in a real browser (headless Chromium), from synthetic rows.

No Spark here: the rows are the ones of the unit tests plus a few older runs, so the chart has
a history to draw. The screenshot is kept in test-artifacts/ for people to look at.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from expectations.report import write_landing_page
from tests.browser import ARTIFACTS_DIR, PNG_SIGNATURE, render_in_chromium
from tests.unit.test_quality_report import GENERATED, SCRIPT_SAMPLE, row, synthetic_rows

pytestmark = pytest.mark.integration

SUITES = ("bronze.customers", "bronze.purchases.dead_letter_rate", "silver.customers", "silver.purchases",
          "gold.daily_revenue")


def history_rows() -> list[dict]:
    """Ten older runs (one a day before r1) with pass rates that move, so the lines differ."""
    rows = []
    for day in range(10):
        run_at = datetime(2024, 4, 21, 6, 0, tzinfo=UTC) + timedelta(days=day)
        for n, suite in enumerate(SUITES):
            stream = "all" if suite.startswith("gold") else suite.split(".")[1]
            for check in range(4):
                ok = (day + n + check) % (3 + n) != 0
                rows.append(row(f"hist-{day:02d}", run_at, suite, f"expect_{check}", stream=stream, success=ok,
                                severity="critical" if check < 2 else "warning"))
    return rows


def test_landing_page_in_chromium(tmp_path):
    docs = tmp_path / "gx" / "index.html"
    docs.parent.mkdir()
    docs.write_text("<!DOCTYPE html><title>Data Docs</title><h1>Data Docs</h1>", encoding="utf-8")
    page = write_landing_page(history_rows() + synthetic_rows(), docs, tmp_path / "report", generated_at=GENERATED)

    png = ARTIFACTS_DIR / "quality-report-synthetic.png"  # kept even when an assertion fails
    dom = render_in_chromium(page, png)

    for suite in SUITES:
        assert f">{suite}<" in dom
    assert "FAILED (critical)" in dom
    assert '<td class="num">2 of 120</td>' in dom  # the critical failure's unexpected count
    assert "&lt;script&gt;alert('x')&lt;/script&gt;" in dom  # shown as text, never run
    assert SCRIPT_SAMPLE not in dom
    assert 'href="../gx/index.html"' in dom
    assert dom.count('class="point"') == 3 * 12  # three layers, ten older runs + r1 + r2

    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000, f"screenshot is only {len(data)} bytes: blank page?"
