"""Token usage as events and rows record it: four counts, or None when unknown.

A provider that reports no usage for a model call (some OpenAI-compatible
servers stream none) leaves that call's usage unknown, and any total that
includes it unknown too: recording zero tokens would claim the call was free.
"""
from __future__ import annotations

from typing import Optional

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
    return {k: total.get(k, 0) + more.get(k, 0) for k in USAGE_KEYS}
