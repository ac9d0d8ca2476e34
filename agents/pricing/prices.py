"""One model call's cost in US dollars, and where its price came from.

The public prices are Pydantic's `genai-prices` (a maintained table of the
providers' models and their price history, cache reads and writes and tiered
prices included, bundled with the package so nothing is fetched at run time;
upgrading the package updates it). It is imported on the first priced call:
its table takes a fifth of a second to load, which no scripted turn pays.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from agents.pricing import overrides

# agentsite's providers whose models the table prices, by the table's provider id
TABLE_PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
# In-process and offline: nothing is spent.
FREE_PROVIDERS = frozenset({"scripted"})


@dataclass(frozen=True)
class Price:
    usd: Decimal | None  # None: no price is known for this model
    source: str  # "override", "table", "free", or "" when unknown


UNKNOWN = Price(None, "")


def cost(model_id: str, usage: dict[str, int], at: datetime, base_url: str = "") -> Price:
    """The price of a call of `model_id` (provider:model) at `at` that used `usage`.

    `base_url`: where the provider was reached, when not its default; a public
    provider's URL (another OpenAI-compatible host) is priced as that provider.
    """
    override = overrides.find(model_id, at)
    if override is not None:
        return Price(override.cost(usage), "override")
    provider, _, model = model_id.partition(":")
    if provider in FREE_PROVIDERS:
        return Price(Decimal(0), "free")
    if provider not in TABLE_PROVIDERS:
        return UNKNOWN
    return _from_table(TABLE_PROVIDERS[provider], model, usage, at, base_url)


def load_table() -> None:
    """Import the table and read its data now (a process that forks workers, so that none of them
    pays for it: some 12 MB, shared by the forks)."""
    importlib.import_module("genai_prices.data_snapshot").get_snapshot()


def _from_table(provider_id: str, model: str, usage: dict[str, int], at: datetime, base_url: str) -> Price:
    genai_prices = importlib.import_module("genai_prices")
    snapshot = importlib.import_module("genai_prices.data_snapshot").get_snapshot()
    if base_url:
        try:
            provider_id = snapshot.find_provider(None, None, base_url).id
        except LookupError:
            pass  # a host the table does not know (a loopback or self-hosted server): the protocol's own
    # The table counts cached tokens inside the input tokens; agentsite counts them apart.
    tokens = genai_prices.Usage(
        input_tokens=usage.get("inputTokens", 0) + usage.get("cacheReadTokens", 0) + usage.get("cacheWriteTokens", 0),
        output_tokens=usage.get("outputTokens", 0),
        cache_read_tokens=usage.get("cacheReadTokens", 0),
        cache_write_tokens=usage.get("cacheWriteTokens", 0),
    )
    try:
        priced = genai_prices.calc_price(tokens, model, provider_id=provider_id, genai_request_timestamp=at)
    except LookupError:
        return UNKNOWN
    return Price(priced.total_price, "table")
