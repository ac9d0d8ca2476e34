"""Token usage as events and rows record it: four counts, or None when unknown.

A provider that reports no usage for a model call (some OpenAI-compatible
servers stream none) leaves that call's usage unknown, and any total that
includes it unknown too: recording zero tokens would claim the call was free.

A priced call's counts carry `costUsd` (agents.pricing); a call whose model
has no known price carries `costUsd: null` and `unpricedCalls: 1`. A total
sums the known costs and counts the unpriced calls, and its `costUsd` is
null only when none of its calls had a price.
"""
from __future__ import annotations

import os
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from agents.pricing import prices
from agents.providers.base import Usage as ProviderUsage

USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")

# Known counts, or None: unknown.
Usage = Optional[dict[str, int]]


def zero() -> dict[str, int]:
    return dict.fromkeys(USAGE_KEYS, 0)


def from_provider(usage: ProviderUsage) -> dict[str, int]:
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
    }


def add_usage(total: Usage, more: Usage) -> Usage:
    if total is None or more is None:
        return None
    summed: dict[str, Any] = {k: total.get(k, 0) + more.get(k, 0) for k in USAGE_KEYS}
    if "costUsd" in total or "costUsd" in more:
        known = [c for c in (total.get("costUsd"), more.get("costUsd")) if c is not None]
        summed["costUsd"] = dollars(sum(known)) if known else None
    unpriced = total.get("unpricedCalls", 0) + more.get("unpricedCalls", 0)
    if unpriced:
        summed["unpricedCalls"] = unpriced
    return summed


def priced(usage: dict[str, int], model_id: str, at: datetime, base_url: str = "") -> dict[str, Any]:
    """One call's counts with its cost."""
    price = prices.cost(model_id, usage, at, base_url)
    if price.usd is None:
        return {**usage, "costUsd": None, "unpricedCalls": 1}
    return {**usage, "costUsd": dollars(price.usd)}


def reached_at(provider: Any, params: dict[str, Any]) -> str:
    """The base URL a provider was reached at, when not its default (an OpenAI-compatible host)."""
    env = getattr(provider, "base_url_env", "")
    return params.get("base_url") or (os.environ.get(env, "") if env else "")


def dollars(amount: Decimal | float) -> float:
    # Sub-cent amounts add up over many calls: kept to a billionth of a cent, not rounded to cents.
    return round(float(amount), 11)
