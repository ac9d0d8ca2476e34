"""Model providers behind one interface, selected by `provider:model` ids.

Providers are named by import path and load on first use: the vendor SDKs
take seconds to import, which no scripted turn should pay.
"""
from __future__ import annotations

import importlib
from typing import Callable

from agents.providers.base import Provider

_registry: dict[str, str | Callable[[], Provider]] = {
    "scripted": "agents.providers.scripted:ScriptedProvider",
    "openai": "agents.providers.openai:OpenAIProvider",
    "anthropic": "agents.providers.anthropic:AnthropicProvider",
    # A whole runtime rather than a step provider: sessions.claude_agent runs its turns.
    "claude-agent": "agents.providers.claude_agent:ClaudeAgentRuntime",
}


def parse_model_id(model_id: str) -> tuple[str, str]:
    """Split `provider:model`; raise ValueError naming what is wrong."""
    provider, sep, model = (model_id or "").partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"model {model_id!r} must look like 'provider:model', e.g. 'scripted:echo'")
    if provider not in _registry:
        known = ", ".join(sorted(_registry))
        raise ValueError(f"model {model_id!r} names an unknown provider {provider!r} (known: {known})")
    return provider, model


def get_provider(model_id: str) -> tuple[Provider, str]:
    provider, model = parse_model_id(model_id)
    factory = _registry[provider]
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = _registry[provider] = getattr(importlib.import_module(module), attr)
    return factory(), model
