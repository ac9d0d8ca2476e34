"""Model providers behind one interface, selected by `provider:model` ids."""
from __future__ import annotations

from typing import Callable

from agents.providers.base import Provider

_registry: dict[str, Callable[[], Provider]] = {}


def register(name: str, factory: Callable[[], Provider]) -> None:
    _registry[name] = factory


def parse_model_id(model_id: str) -> tuple[str, str]:
    """Split `provider:model`; raise ValueError naming what is wrong."""
    provider, sep, model = (model_id or "").partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"model {model_id!r} must look like 'provider:model', e.g. 'scripted:echo'")
    _load_builtin()
    if provider not in _registry:
        known = ", ".join(sorted(_registry))
        raise ValueError(f"model {model_id!r} names an unknown provider {provider!r} (known: {known})")
    return provider, model


def get_provider(model_id: str) -> tuple[Provider, str]:
    provider, model = parse_model_id(model_id)
    return _registry[provider](), model


def _load_builtin() -> None:
    if _registry:
        return
    from agents.providers.anthropic import AnthropicProvider
    from agents.providers.openai import OpenAIProvider
    from agents.providers.scripted import ScriptedProvider

    register("scripted", ScriptedProvider)
    register("openai", OpenAIProvider)
    register("anthropic", AnthropicProvider)
