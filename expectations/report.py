"""The data-quality landing page: one self-contained HTML file over the stored quality results.

Input: the rows of the quality-results Iceberg table, one per expectation per run (run_id,
run_at, layer, stream, suite, table_name, expectation, column_name, severity, success,
observed_value, unexpected_count, element_count, unexpected_sample, message). Output: the page
people open first to decide whether today's tables can be trusted; the Great Expectations Data
Docs it links to keep the per-expectation detail.

The page opens from a file:// URL on an offline machine, so it is plain HTML with inline CSS
and inline SVG: nothing is fetched and no script runs. This module computes what the page
shows; the markup is the Jinja2 template templates/quality.html.j2, rendered with autoescape
on, since suite names, samples and messages are data, not markup.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

LAYERS = ("bronze", "silver", "gold")
# A colour *and* a dash pattern per layer, so the chart stays readable without colour.
SERIES_STYLE = {"bronze": ("#a0522d", "none"), "silver": ("#3b5b8a", "7 4"), "gold": ("#b8860b", "2 3")}
OTHER_STYLE = ("#555555", "10 3 2 3")
PASSED, WARNING, FAILED = "PASSED", "WARNING", "FAILED (critical)"
CSS_CLASS = {PASSED: "pass", WARNING: "warn", FAILED: "fail"}
MAX_SAMPLES = 10
MAX_OBSERVED = 300  # observed values can be whole distributions; Data Docs have the full text


def _text(value: object) -> str:
    """A value from the rows as text ("—" when missing). Undecodable bytes (lone surrogates)
    and control characters become visible escapes instead of breaking the file or vanishing."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c >= " " or c in "\t\n" else f"\\x{ord(c):02x}" for c in text)


def _name(value: object) -> Markup:
    """An identifier (suite, expectation, column) that may wrap after "_" and "." in a narrow
    column instead of in the middle of a word; <wbr> adds no text to the DOM."""
    return escape(_text(value)).replace("_", Markup("_<wbr>")).replace(".", Markup(".<wbr>"))


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


def _observed(text: str | None) -> str:
    """Observed value (JSON text) as readable text: strings unquoted, the rest compact JSON."""
    if text is None:
        return "—"
    try:
        value = json.loads(text)
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError):
        shown = text  # not JSON after all: show it as stored
    return _text(shown[:MAX_OBSERVED] + ("…" if len(shown) > MAX_OBSERVED else ""))


def _samples(text: str | None) -> dict[str, Any] | str:
    """{"shown": up to MAX_SAMPLES values, "more": how many were left out}, or the text as
    stored when it is not JSON. One box per value on the page, so values containing ", " stay
    distinct; blank strings are shown quoted (an empty box would read as "no sample")."""
    if text is None:
        return "—"
    try:
        values = json.loads(text)
    except (ValueError, TypeError):
        return _text(text)
    values = values if isinstance(values, list) else [values]
    texts = [v if isinstance(v, str) and v.strip() else json.dumps(v, ensure_ascii=False) for v in values]
    return {"shown": [_text(t) for t in texts[:MAX_SAMPLES]], "more": len(values) - MAX_SAMPLES}


def _failures(latest: Sequence[tuple[str, str, str, _Run]]) -> list[dict[str, Any]]:
    """The failed expectations of each suite's latest run, critical first."""
    failures = []
    for severity in ("critical", "warning"):
        for _, _, suite, run in latest:
            for row in run.failed(severity):
                count, element = row.get("unexpected_count"), row.get("element_count")
                failures.append({
                    "severity": severity, "suite": suite, "expectation": row["expectation"],
                    "column": row.get("column_name"), "message": row.get("message"),
                    "unexpected": _text(count) + (f" of {element}" if count is not None and element is not None
                                                  else ""),
                    "samples": _samples(row.get("unexpected_sample")), "observed": _observed(row.get("observed_value")),
                })
    return failures


def _chart(runs: Sequence[_Run], layers: Sequence[str]) -> dict[str, Any]:
    """Line chart geometry: x = runs in time order, y = % of the layer's expectations that passed."""
    width, height, left, right, top, bottom = 960, 360, 64, 24, 48, 92
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:  # a single run sits in the middle instead of on the axis
        return left + (plot_w / 2 if len(runs) == 1 else i * plot_w / (len(runs) - 1))

    def y(passed: int, total: int) -> float:
        return top + (1 - passed / total) * plot_h

    # Thin out the time labels so 30 runs do not print on top of each other.
    step = max(1, math.ceil(len(runs) / 16))
    series = []
    for n, layer in enumerate(layers):
        colour, dash = SERIES_STYLE.get(layer, OTHER_STYLE)
        counts = [(i, *run.only(layer)) for i, run in enumerate(runs)]
        points = [{"x": x(i), "y": y(p, t), "xy": f"{x(i):.1f},{y(p, t):.1f}", "run_id": runs[i].run_id,
                   "passed": p, "total": t, "pct": _pct(p, t)}
                  for i, p, t in counts if t]  # runs that did not check this layer have no point
        series.append({"layer": layer, "colour": colour, "dash": dash, "points": points,
                       "legend_x": left + 10 + n * 130})
    return {"runs": runs, "width": width, "height": height, "left": left, "right_x": width - right, "top": top,
            "bottom_y": top + plot_h, "middle_x": left + plot_w / 2, "middle_y": top + plot_h / 2,
            "grid": [(pct, top + (1 - pct / 100) * plot_h) for pct in range(0, 101, 25)],
            "ticks": [(x(i), _when(run.run_at, True)) for i, run in enumerate(runs)
                      if i % step == 0 or i == len(runs) - 1],
            "series": series}


def _streams(runs: Sequence[_Run]) -> list[dict[str, Any]]:
    """Per layer and stream: the latest pass rate and a sparkline over the runs that included it."""
    width, height, pad = 150, 28, 4
    streams = sorted({(str(r["layer"]), str(r["stream"])) for run in runs for r in run.rows},
                     key=lambda ls: (_layer_key(ls[0]), ls[1]))
    out = []
    for layer, stream in streams:
        points = [(run, *run.only(layer, stream)) for run in runs]
        points = [(run, p, t) for run, p, t in points if t]
        xs = [pad + (i * (width - 2 * pad) / (len(points) - 1) if len(points) > 1 else (width - 2 * pad) / 2)
              for i in range(len(points))]
        ys = [pad + (1 - p / t) * (height - 2 * pad) for _, p, t in points]
        _, passed, total = points[-1]
        out.append({"layer": layer, "stream": stream, "pct": _pct(passed, total), "passed": passed, "total": total,
                    "runs": len(points), "tip": ", ".join(f"{run.run_id}: {_pct(p, t)}" for run, p, t in points),
                    "coords": " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys, strict=True)),
                    "last_x": xs[-1], "last_y": ys[-1]})
    return out


@functools.cache
def _template():
    environment = Environment(loader=PackageLoader("expectations", "templates"), autoescape=True,
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)
    environment.filters.update(text=_text, name=_name, when=_when)
    return environment.get_template("quality.html.j2")


def render_landing_page(rows: Sequence[Mapping], docs_href: str, generated_at: datetime,
                        history_runs: int = 30) -> str:
    """The whole page as an HTML5 document (see the module docstring for the row contract)."""
    page: dict[str, Any] = {"generated_at": generated_at, "docs_href": docs_href, "latest": []}
    if rows:
        latest = _latest_per_suite(rows)
        verdicts = [run.verdict for *_, run in latest]
        worst = FAILED if FAILED in verdicts else WARNING if WARNING in verdicts else PASSED
        runs = _runs(rows)
        shown = runs[-max(1, history_runs):]
        layers = sorted({str(r["layer"]) for run in shown for r in run.rows}, key=_layer_key)
        page.update(
            latest=[{"layer": layer, "stream": stream, "name": suite, "run": run}
                    for layer, stream, suite, run in latest],
            overall={FAILED: "FAILED", WARNING: "PASSED with warnings", PASSED: "PASSED"}[worst],
            overall_class=CSS_CLASS[worst], css_class=CSS_CLASS,
            counts={"passed": verdicts.count(PASSED), "warnings": verdicts.count(WARNING),
                    "failed": verdicts.count(FAILED)},
            passed=sum(run.passed for *_, run in latest), total=sum(len(run.rows) for *_, run in latest),
            last_run=runs[-1], failures=_failures(latest), total_runs=len(runs), chart=_chart(shown, layers),
            streams=_streams(shown),
        )
    return _template().render(page)


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
