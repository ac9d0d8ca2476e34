"""An experiment's results: per variant, the mean of each metric over sessions with its 95%
confidence interval, and each variant's difference from control with its interval.

The unit is the session (what was randomized), not the turn: a session's value
of a metric is the sum over its turns' samples (turns, tool calls, tokens, wall
time, derived counts), except `firstTokenMs`, the mean over its turns that had
one. A session with no known value of a metric (tokens a provider never
reported) is left out of that metric's n; for `costUsd`, a session with any
turn of unknown cost is (a sum of the others would read as a cheaper session),
and each variant counts its samples of unknown cost (`unpriced_samples`).

Intervals are Student's t: mean ± t(0.975, n−1)·s/√n for a variant, and Welch's
for a difference (unequal variances, Welch–Satterthwaite degrees of freedom).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from statistics import NormalDist
from typing import Iterable, Mapping

from sessions.models import ExperimentSample

MEAN_PER_TURN = frozenset({"firstTokenMs"})
# Metrics a session knows only when every one of its turns does.
KNOWN_ONLY_WHOLE = frozenset({"costUsd"})
Z975 = NormalDist().inv_cdf(0.975)


# t(0.975) for 1 to 5 degrees of freedom, where the expansion below is least accurate.
T975_SMALL = {1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445, 5: 2.570582}


def t_quantile(df: float) -> float:
    """Student's t 0.975 quantile. Below 5 degrees of freedom, the table (linear in 1/df between
    whole numbers, as Welch's are not whole); from 5 up the Cornish–Fisher expansion around the
    normal quantile, within 0.01% of tables there."""
    if math.isnan(df) or df < 1:
        return math.nan
    if df < 5:
        lo, hi = math.floor(df), math.ceil(df)
        if lo == hi:
            return T975_SMALL[lo]
        w = (1 / df - 1 / hi) / (1 / lo - 1 / hi)
        return w * T975_SMALL[lo] + (1 - w) * T975_SMALL[hi]
    z = Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@dataclass(frozen=True)
class Estimate:
    n: int
    mean: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Difference:
    diff: float | None
    low: float | None
    high: float | None


def estimate(values: list[float]) -> Estimate:
    n = len(values)
    if n == 0:
        return Estimate(0, None, None, None)
    mean = sum(values) / n
    if n == 1:
        return Estimate(1, mean, None, None)
    half = t_quantile(n - 1) * math.sqrt(_variance(values, mean) / n)
    return Estimate(n, mean, mean - half, mean + half)


def welch(treatment: list[float], control: list[float]) -> Difference:
    """treatment − control with Welch's 95% interval (None where either side has fewer than 2 sessions)."""
    if not treatment or not control:
        return Difference(None, None, None)
    mt, mc = sum(treatment) / len(treatment), sum(control) / len(control)
    diff = mt - mc
    if len(treatment) < 2 or len(control) < 2:
        return Difference(diff, None, None)
    vt, vc = _variance(treatment, mt) / len(treatment), _variance(control, mc) / len(control)
    se = math.sqrt(vt + vc)
    if se == 0:
        return Difference(diff, diff, diff)
    df = (vt + vc) ** 2 / (vt**2 / (len(treatment) - 1) + vc**2 / (len(control) - 1))
    half = t_quantile(df) * se
    return Difference(diff, diff - half, diff + half)


def _variance(values: list[float], mean: float) -> float:
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def per_session(samples: Iterable[tuple[str, Mapping[str, float | None]]], metrics: list[str],
                ) -> dict[str, dict[str, float]]:
    """{session id: {metric: the session's value}} from (session id, sample metrics) pairs."""
    sums: dict[str, dict[str, list[float]]] = {}
    partial: set[tuple[str, str]] = set()  # (session, metric) with a turn whose value must be known but is not
    for session_id, values in samples:
        into = sums.setdefault(session_id, {})
        for metric in metrics:
            value = values.get(metric)
            if _number(value):
                into.setdefault(metric, []).append(float(value))
            elif metric in KNOWN_ONLY_WHOLE:
                partial.add((session_id, metric))
    return {sid: {m: (sum(vs) / len(vs) if m in MEAN_PER_TURN else sum(vs)) for m, vs in got.items()
                  if vs and (sid, m) not in partial}
            for sid, got in sums.items()}


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class VariantResult:
    id: str
    label: str
    sessions: int
    metrics: dict[str, Estimate]
    vs_control: dict[str, Difference] = field(default_factory=dict)
    # Samples (turns) whose cost is unknown: a model without a price, or tokens never reported.
    unpriced_samples: int = 0


def results(agent: str, experiment: str, variants: Mapping[str, str], control: str, metrics: list[str],
            since: datetime | None = None) -> list[VariantResult]:
    """Per variant (`variants`: id → label, in declared order), from the samples stored for the experiment."""
    rows = ExperimentSample.objects.filter(agent=agent, experiment=experiment)
    if since is not None:
        rows = rows.filter(at__gte=since)
    by_variant: dict[str, list[tuple[str, Mapping]]] = {}
    for variant, session_id, values in rows.values_list("variant", "session_id", "metrics").iterator():
        by_variant.setdefault(variant, []).append((session_id, values or {}))
    sessions = {v: per_session(by_variant.get(v, []), metrics) for v in variants}
    column = {v: {m: [s[m] for s in sessions[v].values() if m in s] for m in metrics} for v in variants}
    out = []
    for vid, label in variants.items():
        unpriced = sum(not _number(values.get("costUsd")) for _, values in by_variant.get(vid, []))
        result = VariantResult(id=vid, label=label, sessions=len(sessions[vid]),
                               metrics={m: estimate(column[vid][m]) for m in metrics}, unpriced_samples=unpriced)
        if vid != control and control in column:
            result.vs_control = {m: welch(column[vid][m], column[control][m]) for m in metrics}
        out.append(result)
    return out


def over_time(agent: str, experiment: str, metric: str, buckets: int = 12) -> dict[str, list[tuple[datetime, float]]]:
    """Per variant, the running mean of `metric` per session at the end of each of `buckets` equal spans
    between the first and the last sample (sessions counted from their first sample)."""
    rows = list(ExperimentSample.objects.filter(agent=agent, experiment=experiment).order_by("at")
                .values_list("variant", "session_id", "metrics", "at"))
    if not rows:
        return {}
    first, last = rows[0][3], rows[-1][3]
    span = max((last - first).total_seconds(), 1e-6)
    out: dict[str, list[tuple[datetime, float]]] = {}
    for variant in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == variant]
        points = []
        for k in range(1, buckets + 1):
            edge = first + (last - first) * (k / buckets) if span else last
            upto = [(sid, m) for _, sid, m, at in mine if at <= edge]
            values = [s[metric] for s in per_session(upto, [metric]).values() if metric in s]
            if values:
                points.append((edge, sum(values) / len(values)))
        out[variant] = points
    return out
