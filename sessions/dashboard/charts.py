"""The dashboard's charts as geometry for server-side SVG: the template draws what these place.

Coordinates are in the SVG's own units (its viewBox), so the chart scales with the page.
Numbers are rounded to one decimal, and the template prints them unlocalized.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sessions.dashboard.spend import Split

WIDTH, HEIGHT = 720, 170
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 22
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
X_LABELS = 6  # about this many time labels under a chart
STACK = ("completed", "failed", "interrupted")


def _r(value: float) -> float:
    return round(value, 1)


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10ⁿ at or above `value` (1 for nothing), for an axis's top."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def usd(value: Decimal | float) -> str:
    """Dollars as the page prints them: cents from a dollar up; below one, up to four decimals, so
    a cheap session does not read as free ($0.0123)."""
    if abs(value) >= 1 or not value:
        return f"${value:,.2f}"
    if abs(value) < 0.00005:
        return "<$0.0001"
    text = f"{value:.4f}".rstrip("0")
    return f"${text}" if len(text.split(".")[1]) >= 2 else f"${value:.2f}"


def _label(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:g}"
    if unit == "ms" and value >= 1000:
        return f"{value / 1000:g} s"
    return f"{value:g}{' ' + unit if unit else ''}"


def _y_axis(top: float, unit: str = "") -> list[dict[str, Any]]:
    return [{"y": _r(TOP + PLOT_H * (1 - share)), "label": _label(top * share, unit)} for share in (0, 0.5, 1)]


def _time_label(moment: datetime, step: timedelta) -> str:
    if step >= timedelta(days=1):
        return moment.strftime("%a %d %b")
    return moment.strftime("%H:%M") if step < timedelta(hours=6) else moment.strftime("%a %H:%M")


def _x_axis(starts: list[datetime], slot: float, step: timedelta) -> list[dict[str, Any]]:
    every = max(math.ceil(len(starts) / X_LABELS), 1)
    return [{"x": _r(LEFT + i * slot), "label": _time_label(start, step)}
            for i, start in enumerate(starts) if i % every == 0]


def _frame(starts: list[datetime], step: timedelta, top: float, unit: str) -> dict[str, Any]:
    slot = PLOT_W / max(len(starts), 1)
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "top": TOP, "bottom": TOP + PLOT_H,
            "right": LEFT + PLOT_W, "label_y": HEIGHT - 6, "y_axis": _y_axis(top, unit),
            "x_axis": _x_axis(starts, slot, step), "slot": slot}


def turns_chart(buckets: list[dict[str, Any]], step: timedelta) -> dict[str, Any]:
    """Stacked bars, one per bucket: completed, failed and interrupted turns."""
    top = nice_ceiling(max((b["turns"] for b in buckets), default=0))
    chart = _frame([b["start"] for b in buckets], step, top, "")
    slot = chart["slot"]
    bars = []
    for i, bucket in enumerate(buckets):
        base = TOP + PLOT_H
        for status in STACK:
            count = bucket[status]
            if not count:
                continue
            height = PLOT_H * count / top
            base -= height
            bars.append({"x": _r(LEFT + i * slot + slot * 0.1), "y": _r(base), "width": _r(slot * 0.8),
                         "height": _r(height), "status": status, "count": count, "start": bucket["start"]})
    return {**chart, "bars": bars, "empty": not bars}


def lines_chart(buckets: list[dict[str, Any]], step: timedelta, keys: tuple[str, str]) -> dict[str, Any]:
    """One line per key (p50 and p95) through the buckets that have a value, in ms."""
    values = [b[k] for b in buckets for k in keys if b[k] is not None]
    top = nice_ceiling(max(values, default=0))
    chart = _frame([b["start"] for b in buckets], step, top, "ms")
    slot = chart["slot"]
    lines = []
    for key in keys:
        points = [{"x": _r(LEFT + (i + 0.5) * slot), "y": _r(TOP + PLOT_H * (1 - b[key] / top)), "ms": b[key],
                   "start": b["start"]} for i, b in enumerate(buckets) if b[key] is not None]
        lines.append({"key": key, "kind": key[-3:].lower(), "points": points, "path": " ".join(f"{p['x']},{p['y']}" for p in points)})
    return {**chart, "lines": lines, "empty": not values}


ROW_H, LABEL_W = 26, 220


def tokens_chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Horizontal stacked bars, one per agent and model: input then output tokens."""
    top = nice_ceiling(max((r["input"] + r["output"] for r in rows), default=0))
    span = WIDTH - LABEL_W - RIGHT - 70
    bars = []
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        inp, out = span * row["input"] / top, span * row["output"] / top
        bars.append({"y": _r(y), "text_y": _r(y + ROW_H * 0.6), "label": f"{row['agent']} · {row['model'] or '?'}",
                     "input_w": _r(inp), "output_x": _r(LABEL_W + inp), "output_w": _r(out),
                     "total_x": _r(LABEL_W + inp + out + 4), "input": row["input"], "output": row["output"],
                     "total": row["input"] + row["output"]})
    return {"width": WIDTH, "height": TOP + max(len(rows), 1) * ROW_H + 4, "label_w": LABEL_W,
            "bar_h": ROW_H - 8, "bars": bars, "empty": not any(b["total"] for b in bars)}


SERIES = 7  # keys drawn in a colour of their own; the rest are stacked together as "other"
BAR_MAX = 48


def spend_chart(split: Split) -> dict[str, Any]:
    """Stacked bars, one per UTC day: each key's dollars (the most expensive first, at the bottom),
    and a legend of each key's total for the window."""
    drawn = [line.key for line in split.totals[:SERIES]]
    others = [line.key for line in split.totals[SERIES:]]
    series = [(key, f"s{i}", [key]) for i, key in enumerate(drawn)] + ([("other", "other", others)] if others else [])
    days = [datetime(d.year, d.month, d.day) for d in split.days]
    daily = [{cls: (key, sum((split.per_day.get(k, {}).get(day, Decimal(0)) for k in keys), Decimal(0)))
              for key, cls, keys in series} for day in split.days]
    top = nice_ceiling(float(max((sum(v for _, v in d.values()) for d in daily), default=0)))
    chart = _frame(days, timedelta(days=1), top, "$")
    slot = chart["slot"]
    width = min(slot * 0.8, BAR_MAX)
    bars, labels = [], []
    for i, (day, stack) in enumerate(zip(split.days, daily)):
        x = LEFT + i * slot + (slot - width) / 2
        labels.append({"x": _r(x), "label": day.strftime("%a %d %b")})
        base = TOP + PLOT_H
        for cls, (key, dollars) in stack.items():
            if dollars <= 0:
                continue
            height = PLOT_H * float(dollars) / top
            base -= height
            bars.append({"x": _r(x), "y": _r(base), "width": _r(width), "height": _r(height), "class": cls,
                         "key": key, "day": day, "usd": usd(dollars)})
    every = max(math.ceil(len(labels) / X_LABELS), 1)
    colour = {k: cls for _, cls, keys in series for k in keys}
    legend = [{"key": line.key, "class": colour[line.key], "usd": usd(line.cost_usd), "cost": line.cost_usd,
               "unpriced": line.unpriced_calls} for line in split.totals]
    return {**chart, "x_axis": labels[::every], "bars": bars, "legend": legend, "empty": not bars}
