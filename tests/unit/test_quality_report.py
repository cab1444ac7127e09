"""The data-quality landing page (expectations.report), rendered from synthetic result rows."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from expectations.report import render_landing_page, write_landing_page

R1_AT = datetime(2024, 5, 1, 6, 0)  # naive UTC, as Spark returns it
R2_AT = datetime(2024, 5, 2, 6, 0, tzinfo=UTC)  # aware, as pyiceberg returns it
GENERATED = datetime(2024, 5, 2, 7, 30, tzinfo=UTC)
SCRIPT_SAMPLE = "<script>alert('x')</script>"


def row(run_id: str, run_at: datetime, suite: str, expectation: str, *, success: bool = True,
        severity: str = "critical", column: str | None = None, **extra) -> dict:
    layer, stream = suite.split(".")[0], extra.pop("stream", suite.split(".")[1])
    return {"run_id": run_id, "run_at": run_at, "layer": layer, "stream": stream, "suite": suite,
            "table_name": f"lake.{layer}.{stream}", "expectation": expectation, "column_name": column,
            "severity": severity, "success": success, "observed_value": None, "unexpected_count": None,
            "element_count": None, "unexpected_sample": None, "message": None, **extra}


def synthetic_rows() -> list[dict]:
    """Two runs over three layers. r1 (older, full); r2 (newer) does not cover bronze.customers.

    Latest verdicts: bronze.customers WARNING (from r1 only), bronze.purchases.dead_letter_rate
    PASSED, silver.customers PASSED (it failed in r1), silver.purchases FAILED (critical; it
    passed in r1), gold.daily_revenue WARNING. Overall FAILED."""
    r1 = [
        row("r1", R1_AT, "bronze.customers", "table_exists"),
        row("r1", R1_AT, "bronze.customers", "expect_column_values_to_not_be_null", success=False,
            severity="warning", column="email", unexpected_count=3, element_count=40,
            unexpected_sample="[null, null, null]"),
        row("r1", R1_AT, "bronze.purchases.dead_letter_rate", "expect_column_max_to_be_between",
            stream="purchases", column="rate", observed_value="0.0"),
        row("r1", R1_AT, "silver.customers", "expect_column_values_to_be_unique", success=False,
            column="customer_id", unexpected_count=7, unexpected_sample='["old-failure"]'),
        row("r1", R1_AT, "silver.customers", "table_exists"),
        *(row("r1", R1_AT, "silver.purchases", e) for e in ("table_exists", "expect_a", "expect_b")),
        *(row("r1", R1_AT, "gold.daily_revenue", e, stream="all") for e in ("table_exists", "expect_c")),
    ]
    r2 = [
        row("r2", R2_AT, "bronze.purchases.dead_letter_rate", "expect_column_max_to_be_between",
            stream="purchases", column="rate", observed_value="0.01"),
        row("r2", R2_AT, "silver.customers", "expect_column_values_to_be_unique", column="customer_id"),
        row("r2", R2_AT, "silver.customers", "table_exists"),
        row("r2", R2_AT, "silver.purchases", "table_exists"),
        row("r2", R2_AT, "silver.purchases", "expect_column_values_to_be_unique", success=False,
            column="purchase_id", unexpected_count=2, element_count=120,
            unexpected_sample=json.dumps([SCRIPT_SAMPLE, "a & b"])),
        row("r2", R2_AT, "silver.purchases", "expect_b"),
        row("r2", R2_AT, "gold.daily_revenue", "table_exists", stream="all"),
        row("r2", R2_AT, "gold.daily_revenue", "expect_column_mean_to_be_between", stream="all",
            success=False, severity="warning", column="revenue", observed_value="12.5"),
    ]
    return r2 + r1  # newest first: the page must not depend on the order of the rows


class Page(HTMLParser):
    """The parts of the page the tests look at: elements, table cells, SVG titles, text."""

    def __init__(self, document: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.titles: list[str] = []
        self.text: list[str] = []
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._title: list[str] | None = None
        self.feed(document)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        if tag == "table":
            self._table = self.tables.setdefault(a.get("class") or "", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "title":
            self._title = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "title" and self._title is not None:
            self.titles.append("".join(self._title))
            self._title = None

    def handle_data(self, data):
        self.text.append(data)
        for sink in (self._cell, self._title):
            if sink is not None:
                sink.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    def verdicts(self) -> dict[str, list[str]]:
        """suite -> [stream, suite, verdict, checks, latest run, run id] (layer header rows left out)."""
        return {cells[1]: cells for cells in self.tables["verdicts"][1:] if len(cells) == 6}


@pytest.fixture(scope="module")
def html_page() -> str:
    return render_landing_page(synthetic_rows(), "../gx/data_docs/index.html", GENERATED)


@pytest.fixture(scope="module")
def page(html_page) -> Page:
    return Page(html_page)


def test_overall_verdict_and_counts(page):
    banner = " ".join(page.text)
    assert "Data quality" in page.titles
    assert re.search(r"FAILED\s*5 suites: 2 passed, 2 with warnings, 1 failed \(critical\)", banner)
    # latest runs: bronze.customers 1/2, dead_letter_rate 1/1, silver.customers 2/2, silver.purchases 2/3, gold 1/2
    assert "7/10 checks passed" in banner
    assert "Generated 2024-05-02 07:30:00 UTC" in banner


def test_verdict_per_suite_uses_each_suites_latest_run(page):
    verdicts = page.verdicts()
    assert list(verdicts) == ["bronze.customers", "bronze.purchases.dead_letter_rate", "silver.customers",
                              "silver.purchases", "gold.daily_revenue"]
    got = {suite: (cells[2], cells[3], cells[5]) for suite, cells in verdicts.items()}
    assert got == {
        "bronze.customers": ("WARNING", "1/2", "r1"),  # not in r2: its r1 verdict stands
        "bronze.purchases.dead_letter_rate": ("PASSED", "1/1", "r2"),
        "silver.customers": ("PASSED", "2/2", "r2"),  # failed in r1, fixed in r2
        "silver.purchases": ("FAILED (critical)", "2/3", "r2"),  # passed in r1, broken in r2
        "gold.daily_revenue": ("WARNING", "1/2", "r2"),
    }
    assert verdicts["bronze.customers"][4] == "2024-05-01 06:00:00 UTC"
    assert verdicts["silver.purchases"][4] == "2024-05-02 06:00:00 UTC"
    groups = [cells[0] for cells in page.tables["verdicts"] if len(cells) == 1]
    assert groups == ["Layer: bronze", "Layer: silver", "Layer: gold"]
    # Colour comes from a class per verdict, the verdict itself is text.
    classes = [a["class"] for a in page.all("span") if a.get("class", "").startswith("verdict")]
    assert classes[:5] == ["verdict warn", "verdict pass", "verdict pass", "verdict fail", "verdict warn"]


def test_failures_of_latest_runs_critical_first(page, html_page):
    header, *failures = page.tables["failures"]
    assert header[:6] == ["Severity", "Suite", "Expectation", "Column", "Unexpected", "Sample values"]
    assert [(f[0], f[1], f[2], f[3]) for f in failures] == [
        ("critical", "silver.purchases", "expect_column_values_to_be_unique", "purchase_id"),
        ("warning", "bronze.customers", "expect_column_values_to_not_be_null", "email"),
        ("warning", "gold.daily_revenue", "expect_column_mean_to_be_between", "revenue"),
    ]
    critical = failures[0]
    assert critical[4] == "2 of 120"
    assert critical[5] == f"{SCRIPT_SAMPLE}, a & b"
    assert failures[1][5] == "null, null, null"
    assert failures[2][6] == "12.5"  # observed value
    assert "old-failure" not in html_page  # silver.customers' r1 failure is history, not news


def test_everything_from_the_rows_is_escaped(html_page):
    assert "<script" not in html_page.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html_page
    assert "a &amp; b" in html_page
    nasty = '<b>"q"&amp;</b>'
    rows = [row("r1", R1_AT, f"silver.{nasty}", "expect_x", success=False, column=nasty, message=f"bad {nasty}\x00",
                unexpected_sample=json.dumps([nasty, "\udcff"]), observed_value=json.dumps({"v": nasty}))]
    document = render_landing_page(rows, "docs/index.html?a=1&b=<x>", GENERATED)
    assert "<b>" not in document and '"q"' not in document.replace('="', "").replace('" ', "")
    parsed = Page(document)
    text = "".join(parsed.text)
    assert f"silver.{nasty}" in text and f"bad {nasty}\\x00" in text and "\\udcff" in text
    assert parsed.all("a")[0]["href"] == "docs/index.html?a=1&b=<x>"
    document.encode("utf-8")  # lone surrogates did not survive into the page


def test_page_is_self_contained(html_page, page):
    # The only URL is the SVG namespace; no script, stylesheet link or image is fetched.
    urls = set(re.findall(r"https?://[^\"' <>]+", html_page))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert not page.all("script") and not page.all("link") and not page.all("img")
    assert [a["href"] for a in page.all("a")] == ["../gx/data_docs/index.html"]
    assert html_page.startswith("<!DOCTYPE html>") and "<style>" in html_page


def test_chart_has_one_line_per_layer_and_a_point_per_run(page):
    lines = page.all("polyline", **{"class": "series"})
    assert [line["data-layer"] for line in lines] == ["bronze", "silver", "gold"]
    for line in lines:
        assert len(line["points"].split()) == 2
        layer_points = page.all("circle", **{"class": "point", "data-layer": line["data-layer"]})
        assert len(layer_points) == 2
    assert "run r2 · silver · 4/5 passed (80 %)" in page.titles  # silver.customers 2/2 + silver.purchases 2/3
    assert "run r1 · silver · 4/5 passed (80 %)" in page.titles  # silver.customers 1/2 + silver.purchases 3/3
    assert "run r1 · bronze · 2/3 passed (66.7 %)" in page.titles
    assert "run r2 · bronze · 1/1 passed (100 %)" in page.titles
    # y grows downwards: bronze at 66.7 % in r1 sits lower than at 100 % in r2; x: r1 left of r2.
    (x1, y1), (x2, y2) = ((float(v) for v in p.split(",")) for p in lines[0]["points"].split())
    assert x1 < x2 and y1 > y2
    assert lines[1]["points"].split()[0].split(",")[1] == lines[1]["points"].split()[1].split(",")[1]  # 80 %, 80 %
    texts = "".join(page.text)
    assert "Expectations passed (%)" in texts and "Run (time, UTC)" in texts and "05-02 06:00" in texts


def test_per_stream_table(page):
    rows = {(r[0], r[1]): r for r in page.tables["streams"][1:]}
    assert list(rows) == [("bronze", "customers"), ("bronze", "purchases"), ("silver", "customers"),
                          ("silver", "purchases"), ("gold", "all")]
    assert rows[("silver", "purchases")][2:4] == ["66.7 % (2/3)", "2"]  # latest r2, two runs
    assert rows[("bronze", "customers")][2:4] == ["50 % (1/2)", "1"]  # only r1 included it


def test_history_keeps_the_last_runs():
    start = datetime(2024, 1, 1)
    rows = [row(f"run-{i:02d}", start + timedelta(hours=i), "silver.purchases", "expect_a", success=i % 3 != 0)
            for i in range(35)]
    page = Page(render_landing_page(rows, "d.html", GENERATED, history_runs=30))
    points = page.all("circle", **{"class": "point"})
    assert len(points) == 30
    assert any("run run-34 " in t for t in page.titles) and not any("run run-04 " in t for t in page.titles)
    assert "The last 30 of 35 runs" in "".join(page.text)


def test_single_run_renders_points():
    rows = [r for r in synthetic_rows() if r["run_id"] == "r2"]
    page = Page(render_landing_page(rows, "d.html", GENERATED))
    lines = page.all("polyline", **{"class": "series"})
    assert [line["data-layer"] for line in lines] == ["bronze", "silver", "gold"]
    assert all(len(line["points"].split()) == 1 for line in lines)
    assert len(page.all("circle", **{"class": "point"})) == 3
    assert "The last 1 of 1 runs" in "".join(page.text)


def test_zero_rows_says_nothing_was_recorded():
    document = render_landing_page([], "d.html", GENERATED)
    page = Page(document)
    assert "No quality run has been recorded yet" in "".join(page.text)
    assert not page.all("svg") and not page.tables
    assert page.all("a")[0]["href"] == "d.html"


@pytest.mark.parametrize(("change", "expected"), [
    ("fix critical", "PASSED with warnings"),
    ("fix all", "PASSED"),
])
def test_overall_verdict_without_critical_failures(change, expected):
    rows = synthetic_rows()
    for r in rows:
        if r["severity"] == "critical" or change == "fix all":
            r["success"] = True
    page = Page(render_landing_page(rows, "d.html", GENERATED))
    assert [a for a in page.all("strong") if a.get("class") == "overall"]
    overall = re.search(r"(PASSED with warnings|PASSED|FAILED)\s*5 suites", "".join(page.text))
    assert overall and overall.group(1) == expected
    if change == "fix all":
        assert "No failures." in "".join(page.text)


def test_samples_are_capped_at_ten():
    sample = json.dumps([f"v{i}" for i in range(15)] + [None, 3])
    rows = [row("r1", R1_AT, "silver.purchases", "expect_x", success=False, unexpected_sample=sample)]
    cells = Page(render_landing_page(rows, "d.html", GENERATED)).tables["failures"][1]
    assert cells[5] == ", ".join(f"v{i}" for i in range(10)) + " (+7 more)"


def test_write_landing_page_links_docs_relatively(tmp_path):
    docs = tmp_path / "gx" / "data docs" / "index.html"
    docs.parent.mkdir(parents=True)
    docs.write_text("<html></html>")
    path = write_landing_page(synthetic_rows(), docs, tmp_path / "site" / "quality", generated_at=GENERATED)
    assert path == tmp_path / "site" / "quality" / "index.html"
    page = Page(path.read_text(encoding="utf-8"))
    assert [a["href"] for a in page.all("a")] == ["../../gx/data%20docs/index.html"]
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]  # no temporary file left
