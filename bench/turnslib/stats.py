"""Percentiles and summaries of latencies, and the memory slope over sessions."""
from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank-interpolated percentile (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "mean": statistics.fmean(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def latency_line(name: str, times: list[float], width: int = 8) -> str:
    """One line of a side-by-side latency comparison (bench/proxy_latency.py, bench/doors.py): nearest-rank p95."""
    ordered = sorted(times)
    p95 = ordered[max(0, round(len(ordered) * 0.95) - 1)]
    return f"{name:{width}} n={len(times)}  p50 {statistics.median(times):6.1f} ms  p95 {p95:6.1f} ms  " \
           f"mean {statistics.fmean(times):6.1f} ms"


def parse_at(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def r1(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


GROWTH_MIN_SESSIONS = 1000


def rss_growth(series: list[dict[str, Any]]) -> dict[str, Any]:
    """MB per 1,000 sessions between the first post-warm-up sample and the last one."""
    base = next((s for s in series if s["label"] == "after warm-up"), None)
    last = series[-1] if series else None
    if not base or not last or last["sessions"] <= base["sessions"]:
        return {}
    sessions = last["sessions"] - base["sessions"]
    out: dict[str, Any] = {"sessions": sessions}
    for proc in ("web", "worker"):
        for kind in ("rss_mb", "uss_mb"):
            key = f"{proc}_{kind}"
            if key in base and key in last:
                delta = last[key] - base[key]
                out[f"{key}_delta"] = round(delta, 1)
                out[f"{key}_per_1k_sessions"] = round(delta / sessions * 1000, 2)
    # Sequential sessions only (the W1 samples), and their second half: concurrency (W3)
    # raises the high-water mark once, and caches (SQLite's page cache, the allocator's
    # arenas) fill over the first few hundred sessions; a leak shows as a steady slope after.
    w1 = [s for s in series if s["label"].startswith("W1 ")]
    w1 = w1[len(w1) // 2:]
    for proc in ("web", "worker"):
        key = f"{proc}_uss_mb"
        if len(w1) >= 2 and all(key in s for s in w1):
            xs, ys = [s["sessions"] for s in w1], [s[key] for s in w1]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            den = sum((x - mx) ** 2 for x in xs)
            if den:
                out[f"w1_{proc}_uss_mb_per_1k_sessions"] = round(
                    sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 1000, 2)
    # The web process (where sessions' streams live) "grows" above 1 MB per 1,000 sessions;
    # under GROWTH_MIN_SESSIONS sequential sessions the slope is too short to judge.
    span = (w1[-1]["sessions"] - w1[0]["sessions"]) if len(w1) >= 2 else 0
    w = out.get("w1_web_uss_mb_per_1k_sessions")
    out["web_growth"] = ("too short to tell (--w1 3000)" if span < GROWTH_MIN_SESSIONS or w is None
                         else "GROWS" if w > 1.0 else "flat")
    return out

