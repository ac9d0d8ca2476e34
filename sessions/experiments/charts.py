"""An experiment's charts as geometry for server-side SVG, as the dashboard's (`dashboard.charts`):
per metric, each variant's mean with its interval (a dot on a whisker), and the running mean
per variant over time (a line per variant). The template draws what these place."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sessions.dashboard.charts import nice_ceiling
from sessions.experiments.results import Estimate

WIDTH, LABEL_W, RIGHT, ROW_H, TOP = 720, 160, 24, 28, 8
TIME_H, TIME_LEFT, TIME_BOTTOM = 150, 56, 22


def _r(value: float) -> float:
    return round(value, 1)


def interval_chart(rows: list[tuple[str, str, Estimate]]) -> dict[str, Any]:
    """One row per variant (id, label, estimate): the interval as a line, the mean as a dot.
    The axis starts at zero unless a value is below it (a metric of counts or times never is)."""
    values = [v for _, _, e in rows for v in (e.low, e.high, e.mean) if v is not None]
    low = min(min(values, default=0), 0)
    high = nice_ceiling(max(values, default=0)) if max(values, default=0) > 0 else 1
    span = WIDTH - LABEL_W - RIGHT

    def x(value: float) -> float:
        return _r(LABEL_W + span * (value - low) / ((high - low) or 1))

    placed = []
    for i, (vid, label, e) in enumerate(rows):
        y = TOP + i * ROW_H + ROW_H / 2
        placed.append({"id": vid, "label": label, "y": _r(y), "text_y": _r(y + 4), "n": e.n,
                       "mean": e.mean, "low": e.low, "high": e.high,
                       "mean_x": None if e.mean is None else x(e.mean),
                       "low_x": None if e.low is None else x(e.low), "high_x": None if e.high is None else x(e.high)})
    height = TOP + max(len(rows), 1) * ROW_H + 20
    return {"width": WIDTH, "height": height, "label_w": LABEL_W, "right": WIDTH - RIGHT, "axis_y": height - 14,
            "zero_x": x(0), "top_label": f"{high:g}", "low_label": f"{low:g}", "rows": placed,
            "empty": all(r["mean"] is None for r in placed)}


def time_chart(series: dict[str, list[tuple[datetime, float]]]) -> dict[str, Any]:
    """A line per variant through its running mean at each moment."""
    moments = [t for points in series.values() for t, _ in points]
    values = [v for points in series.values() for _, v in points]
    top = nice_ceiling(max(values, default=0))
    plot_w, plot_h = WIDTH - TIME_LEFT - RIGHT, TIME_H - TOP - TIME_BOTTOM
    first, last = (min(moments), max(moments)) if moments else (None, None)
    span = (last - first).total_seconds() if moments else 0
    lines = []
    for i, (variant, points) in enumerate(sorted(series.items())):
        placed = [{"x": _r(TIME_LEFT + plot_w * (((t - first).total_seconds() / span) if span else 1)),
                   "y": _r(TOP + plot_h * (1 - v / top)), "value": round(v, 2), "at": t} for t, v in points]
        lines.append({"variant": variant, "index": i % 6, "points": placed,
                      "path": " ".join(f"{p['x']},{p['y']}" for p in placed)})
    return {"width": WIDTH, "height": TIME_H, "left": TIME_LEFT, "top": TOP, "bottom": TOP + plot_h,
            "right": TIME_LEFT + plot_w, "top_label": f"{top:g}", "label_y": TIME_H - 6,
            "first": first, "last": last, "lines": lines, "empty": not values}
