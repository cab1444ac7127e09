"""The data-quality landing page: one self-contained HTML file over the stored quality results.

Input: the rows of the quality-results Iceberg table, one per expectation per run (run_id,
run_at, layer, stream, suite, table_name, expectation, column_name, severity, success,
observed_value, unexpected_count, element_count, unexpected_sample, message). Output: the page
people open first to decide whether today's tables can be trusted; the Great Expectations Data
Docs it links to keep the per-expectation detail.

The page opens from a file:// URL on an offline machine, so it is plain HTML with inline CSS
and inline SVG: nothing is fetched and no script runs. Every value taken from the rows is
HTML-escaped, since suite names, samples and messages are data, not markup.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

LAYERS = ("bronze", "silver", "gold")
# A colour *and* a dash pattern per layer, so the chart stays readable without colour.
SERIES_STYLE = {"bronze": ("#a0522d", "none"), "silver": ("#3b5b8a", "7 4"), "gold": ("#b8860b", "2 3")}
OTHER_STYLE = ("#555555", "10 3 2 3")
PASSED, WARNING, FAILED = "PASSED", "WARNING", "FAILED (critical)"
CSS_CLASS = {PASSED: "pass", WARNING: "warn", FAILED: "fail"}
MAX_SAMPLES = 10
MAX_OBSERVED = 300  # observed values can be whole distributions; Data Docs have the full text

CSS = """
body{font:14px/1.45 "DejaVu Sans",system-ui,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1160px;margin:0 auto;padding:20px 28px 40px}
h1{margin:0 0 12px;font-size:28px}
h2{margin:32px 0 10px;font-size:19px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{margin:18px 0 6px;font-size:15px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
thead th{background:#eef1f4}
tr.group th{background:#dfe5ec;font-size:15px}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.mono,code{font-family:"DejaVu Sans Mono",monospace;font-size:12.5px;overflow-wrap:break-word}
td.mono{padding-top:6px}
/* Names keep their width (break-word); sample and observed values may be long: break anywhere. */
td.values,td.values code{overflow-wrap:anywhere}
table.failures{table-layout:fixed}
table.failures .num{white-space:normal}
code.sample{background:#f0f2f5;border:1px solid #d8dde3;border-radius:3px;padding:0 3px;white-space:pre-wrap}
.verdict{font-weight:bold;padding:1px 6px;border-radius:3px;white-space:nowrap}
.pass{color:#14532d;background:#dcfce7}.warn{color:#7c2d12;background:#fef3c7}.fail{color:#7f1d1d;background:#fee2e2}
.none{color:#1f2328;background:#eef1f4}
.banner{padding:12px 16px;border:1px solid #d0d7de;border-radius:6px;font-size:16px;margin:0 0 8px}
.banner strong{font-size:20px;margin-right:8px}
.meta{color:#57606a;margin:4px 0}
.chart{width:100%;height:auto;background:#fff;border:1px solid #d0d7de;display:block}
.spark{vertical-align:middle}
"""


def _esc(value: object) -> str:
    """A value from the rows as HTML text ("—" when missing). Undecodable bytes (lone surrogates)
    and control characters become visible escapes instead of breaking the file or vanishing."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape("".join(c if c >= " " or c in "\t\n" else f"\\x{ord(c):02x}" for c in text))


def _name(value: object) -> str:
    """An identifier (suite, expectation, column) that may wrap after "_" and "." in a narrow
    column instead of in the middle of a word; <wbr> adds no text to the DOM."""
    return _esc(value).replace("_", "_<wbr>").replace(".", ".<wbr>")


def _utc(moment: datetime) -> datetime:
    # The table stores UTC: Spark hands back naive datetimes, pyiceberg aware ones.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _when(moment: datetime, short: bool = False) -> str:
    return _utc(moment).strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S UTC")


def _layer_key(layer: str) -> tuple[int, str]:
    return (LAYERS.index(layer) if layer in LAYERS else len(LAYERS), layer)


def _pct(passed: int, total: int) -> str:
    return "n/a" if not total else f"{100 * passed / total:.1f}".removesuffix(".0") + " %"


@dataclass(frozen=True)
class _Run:
    """The rows of one run_id (of the whole run, or only of one suite)."""

    run_id: str
    run_at: datetime
    rows: tuple[Mapping, ...]

    @property
    def passed(self) -> int:
        return sum(1 for r in self.rows if r["success"])

    def failed(self, severity: str) -> list[Mapping]:
        return [r for r in self.rows if not r["success"] and r["severity"] == severity]

    @property
    def verdict(self) -> str:
        return FAILED if self.failed("critical") else WARNING if self.failed("warning") else PASSED

    def only(self, layer: str, stream: str | None = None) -> tuple[int, int]:
        """(passed, total) of the rows of a layer (and stream); total 0 if the run had none."""
        rows = [r for r in self.rows if r["layer"] == layer and stream in (None, r["stream"])]
        return sum(1 for r in rows if r["success"]), len(rows)


def _runs(rows: Iterable[Mapping]) -> list[_Run]:
    """Runs in time order; a run's time is its earliest row (suites of one run are written
    seconds apart), ties broken by run id so the order is stable."""
    by_id: dict[str, list[Mapping]] = defaultdict(list)
    for row in rows:
        by_id[str(row["run_id"])].append(row)
    runs = [_Run(rid, min(_utc(r["run_at"]) for r in rs), tuple(rs)) for rid, rs in by_id.items()]
    return sorted(runs, key=lambda run: (run.run_at, run.run_id))


def _latest_per_suite(rows: Sequence[Mapping]) -> list[tuple[str, str, str, _Run]]:
    """(layer, stream, suite, latest run of that suite) in page order. Per suite, because a run
    may cover only some layers or streams: a silver-only run must not hide bronze's verdict."""
    by_suite: dict[str, list[Mapping]] = defaultdict(list)
    for row in rows:
        by_suite[str(row["suite"])].append(row)
    latest = []
    for suite, suite_rows in by_suite.items():
        run = _runs(suite_rows)[-1]
        latest.append((str(run.rows[0]["layer"]), str(run.rows[0]["stream"]), suite, run))
    return sorted(latest, key=lambda s: (_layer_key(s[0]), s[1], s[2]))


def _json_text(text: str | None) -> str:
    """Observed value (JSON text) as readable text: strings unquoted, the rest compact JSON."""
    if text is None:
        return "—"
    try:
        value = json.loads(text)
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError):
        shown = text  # not JSON after all: show it as stored
    return _esc(shown[:MAX_OBSERVED] + ("…" if len(shown) > MAX_OBSERVED else ""))


def _samples(text: str | None) -> str:
    if text is None:
        return "—"
    try:
        values = json.loads(text)
    except (ValueError, TypeError):
        return _esc(text)
    values = values if isinstance(values, list) else [values]
    # One box per value, so values containing ", " stay distinct; blank strings are shown
    # quoted (an empty box would read as "no sample").
    texts = [v if isinstance(v, str) and v.strip() else json.dumps(v, ensure_ascii=False) for v in values]
    shown = ", ".join(f'<code class="sample">{_esc(t)}</code>' for t in texts[:MAX_SAMPLES])
    more = len(values) - MAX_SAMPLES
    return shown + (f" (+{more} more)" if more > 0 else "")


def _chart(runs: Sequence[_Run], layers: Sequence[str]) -> str:
    """Line chart: x = runs in time order, y = % of the layer's expectations that passed."""
    width, height, left, right, top, bottom = 960, 360, 64, 24, 48, 92
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:  # a single run sits in the middle instead of on the axis
        return left + (plot_w / 2 if len(runs) == 1 else i * plot_w / (len(runs) - 1))

    def y(passed: int, total: int) -> float:
        return top + (1 - passed / total) * plot_h

    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
           f'aria-label="Pass rate per layer over the last {len(runs)} runs" font-size="12" fill="#1f2328">']
    for pct in range(0, 101, 25):
        gy = top + (1 - pct / 100) * plot_h
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#d8dde3"/>'
                   f'<text x="{left - 8}" y="{gy + 4:.1f}" text-anchor="end">{pct} %</text>')
    # Thin out the time labels so 30 runs do not print on top of each other.
    step = max(1, math.ceil(len(runs) / 16))
    for i, run in enumerate(runs):
        if i % step == 0 or i == len(runs) - 1:
            out.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 5}" '
                       f'stroke="#57606a"/><text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="end" '
                       f'transform="rotate(-35 {x(i):.1f} {top + plot_h + 16})">{_when(run.run_at, True)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#57606a"/>'
               f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#57606a"/>'
               f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">Run (time, UTC)</text>'
               f'<text x="16" y="{top + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + plot_h / 2})">Expectations passed (%)</text>')
    for n, layer in enumerate(layers):
        colour, dash = SERIES_STYLE.get(layer, OTHER_STYLE)
        points = [(i, *run.only(layer)) for i, run in enumerate(runs)]
        points = [(i, p, t) for i, p, t in points if t]  # runs that did not check this layer
        coords = " ".join(f"{x(i):.1f},{y(p, t):.1f}" for i, p, t in points)
        out.append(f'<polyline class="series" data-layer="{_esc(layer)}" points="{coords}" fill="none" '
                   f'stroke="{colour}" stroke-width="2.5" stroke-dasharray="{dash}"/>')
        for i, p, t in points:
            tip = f"run {_esc(runs[i].run_id)} · {_esc(layer)} · {p}/{t} passed ({_pct(p, t)})"
            out.append(f'<circle class="point" data-layer="{_esc(layer)}" cx="{x(i):.1f}" cy="{y(p, t):.1f}" '
                       f'r="4.5" fill="{colour}" stroke="#fff"><title>{tip}</title></circle>')
        lx = left + 10 + n * 130  # legend above the plot, one entry per layer
        out.append(f'<g class="legend"><line x1="{lx}" x2="{lx + 34}" y1="22" y2="22" stroke="{colour}" '
                   f'stroke-width="2.5" stroke-dasharray="{dash}"/><circle cx="{lx + 17}" cy="22" r="4.5" '
                   f'fill="{colour}"/><text x="{lx + 42}" y="26" font-size="13">{_esc(layer)}</text></g>')
    return "\n".join(out) + "</svg>"


def _sparkline(points: Sequence[tuple[_Run, int, int]]) -> str:
    width, height, pad = 150, 28, 4
    xs = [pad + (i * (width - 2 * pad) / (len(points) - 1) if len(points) > 1 else (width - 2 * pad) / 2)
          for i in range(len(points))]
    ys = [pad + (1 - p / t) * (height - 2 * pad) for _, p, t in points]
    tip = ", ".join(f"{_esc(run.run_id)}: {_pct(p, t)}" for run, p, t in points)
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{tip}</title>'
            f'<rect width="{width}" height="{height}" fill="#f6f8fa"/>'
            f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys, strict=True))}" '
            f'fill="none" stroke="#3b5b8a" stroke-width="1.5"/>'
            f'<circle cx="{xs[-1]:.1f}" cy="{ys[-1]:.1f}" r="3" fill="#3b5b8a"/></svg>')


def _verdicts(latest: Sequence[tuple[str, str, str, _Run]]) -> str:
    out = ['<table class="verdicts"><thead><tr><th>Stream</th><th>Suite</th><th>Verdict</th>'
           '<th>Checks passed</th><th>Latest run</th><th>Run id</th></tr></thead><tbody>']
    for n, (layer, stream, suite, run) in enumerate(latest):
        if n == 0 or latest[n - 1][0] != layer:
            out.append(f'<tr class="group"><th colspan="6">Layer: {_esc(layer)}</th></tr>')
        out.append(f'<tr><td>{_esc(stream)}</td><td class="mono">{_esc(suite)}</td>'
                   f'<td><span class="verdict {CSS_CLASS[run.verdict]}">{run.verdict}</span></td>'
                   f'<td class="num">{run.passed}/{len(run.rows)}</td><td class="num">{_when(run.run_at)}</td>'
                   f'<td class="mono">{_esc(run.run_id)}</td></tr>')
    return "\n".join(out) + "</tbody></table>"


def _failures(latest: Sequence[tuple[str, str, str, _Run]]) -> str:
    failed = [(sev, suite, row) for sev in ("critical", "warning")
              for _, _, suite, run in latest for row in run.failed(sev)]  # critical first
    if not failed:
        return '<p class="verdict pass">No failures.</p>'
    # Fixed column widths: long samples or messages must not squeeze the names off the page.
    widths = "".join(f'<col style="width:{w}%">' for w in (8, 12, 16, 11, 9, 20, 10, 14))
    out = [f'<table class="failures"><colgroup>{widths}</colgroup><thead><tr><th>Severity</th><th>Suite</th>'
           '<th>Expectation</th><th>Column</th><th>Unexpected</th><th>Sample values</th><th>Observed</th>'
           '<th>Message</th></tr></thead><tbody>']
    for sev, suite, row in failed:
        count = row.get("unexpected_count")
        element = row.get("element_count")
        of = f" of {element}" if count is not None and element is not None else ""
        out.append(f'<tr><td><span class="verdict {"fail" if sev == "critical" else "warn"}">{sev}</span></td>'
                   f'<td class="mono">{_name(suite)}</td><td class="mono">{_name(row["expectation"])}</td>'
                   f'<td class="mono">{_name(row.get("column_name"))}</td>'
                   f'<td class="num">{_esc(count)}{of}</td>'
                   f'<td class="values">{_samples(row.get("unexpected_sample"))}</td>'
                   f'<td class="mono values">{_json_text(row.get("observed_value"))}</td>'
                   f'<td>{_esc(row.get("message"))}</td></tr>')
    return "\n".join(out) + "</tbody></table>"


def _history(runs: Sequence[_Run], total_runs: int) -> str:
    layers = sorted({str(r["layer"]) for run in runs for r in run.rows}, key=_layer_key)
    out = [f'<p class="meta">The last {len(runs)} of {total_runs} runs; each point is the share of the '
           "run's expectations on that layer that passed (hover a point for run id and counts).</p>",
           _chart(runs, layers),
           '<h3>Per layer and stream</h3><table class="streams"><thead><tr><th>Layer</th><th>Stream</th>'
           '<th>Latest pass rate</th><th>Runs</th><th>Trend (runs that included the stream)</th></tr></thead><tbody>']
    streams = sorted({(str(r["layer"]), str(r["stream"])) for run in runs for r in run.rows},
                     key=lambda ls: (_layer_key(ls[0]), ls[1]))
    for layer, stream in streams:
        points = [(run, *run.only(layer, stream)) for run in runs]
        points = [(run, p, t) for run, p, t in points if t]
        _, p, t = points[-1]
        out.append(f'<tr><td>{_esc(layer)}</td><td>{_esc(stream)}</td><td class="num">{_pct(p, t)} ({p}/{t})</td>'
                   f'<td class="num">{len(points)}</td><td>{_sparkline(points)}</td></tr>')
    return "\n".join(out) + "</tbody></table>"


def render_landing_page(rows: Sequence[Mapping], docs_href: str, generated_at: datetime,
                        history_runs: int = 30) -> str:
    """The whole page as an HTML5 document (see the module docstring for the row contract)."""
    docs = (f'<a href="{html.escape(docs_href, quote=True)}">Great Expectations Data Docs</a> '
            "(per-expectation detail)")
    head = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Data quality</title><style>{CSS}</style></head><body><main>\n<h1>Data quality</h1>\n")
    meta = f'<p class="meta">Generated {_when(generated_at)}. Details: {docs}.</p>\n'
    if not rows:
        return (head + '<p class="banner none"><strong>No data</strong>No quality run has been recorded yet '
                "(run <code>lakehouse quality run</code>).</p>\n" + meta + "</main></body></html>\n")
    latest = _latest_per_suite(rows)
    counts = {v: sum(1 for *_, run in latest if run.verdict == v) for v in (PASSED, WARNING, FAILED)}
    overall = "FAILED" if counts[FAILED] else "PASSED with warnings" if counts[WARNING] else "PASSED"
    passed = sum(run.passed for *_, run in latest)
    total = sum(len(run.rows) for *_, run in latest)
    css = CSS_CLASS[FAILED if counts[FAILED] else WARNING if counts[WARNING] else PASSED]
    runs = _runs(rows)
    return (head
            + f'<p class="banner {css}"><strong class="overall">{overall}</strong>{len(latest)} suites: '
            f"{counts[PASSED]} passed, {counts[WARNING]} with warnings, {counts[FAILED]} failed (critical); "
            f"{passed}/{total} checks passed in each suite's latest run.</p>\n"
            + meta + f'<p class="meta">Most recent run: {_esc(runs[-1].run_id)} at {_when(runs[-1].run_at)}.</p>\n'
            + f"<h2>Latest verdict by layer and stream</h2>\n{_verdicts(latest)}\n"
            + f"<h2>Failures in the latest runs</h2>\n{_failures(latest)}\n"
            + f"<h2>Pass rate over past runs</h2>\n{_history(runs[-max(1, history_runs):], len(runs))}\n"
            + "</main></body></html>\n")


def write_landing_page(rows: Sequence[Mapping], docs_index: Path, out_dir: Path,
                       generated_at: datetime | None = None) -> Path:
    """Write ``out_dir/index.html``, linking the Data Docs index by a relative path (the pair
    of folders can then be copied or served together). Atomic: readers never see half a page."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    href = quote(Path(os.path.relpath(Path(docs_index).resolve(), out_dir.resolve())).as_posix())
    page = render_landing_page(rows, href, generated_at or datetime.now(UTC))
    target = out_dir / "index.html"
    fd, tmp = tempfile.mkstemp(prefix=".index.", suffix=".html.tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the page is meant to be read
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
