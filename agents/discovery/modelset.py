"""What an agent may run on and talk to: `Agent(model=..., models=[...], fallback=[...], peers=[...])`.

The models a session may be bound to are resolved once, when the folder is
loaded for a deploy: an agent that names none takes the server's default
model then, and the release keeps it (a worker loading the release later
is given it back, whatever its own environment says).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from agents import providers
from agents.definitions import Agent
from agents.providers.runtimes import missing_runtime, runtime_of

PEER_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
PEER_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
TOKEN_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")


@dataclass(frozen=True)
class ModelSet:
    models: list[str]
    fallback: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    # Agents on A2A servers (ours or anyone's), by URL: {"url", "token"?: "${SECRET}"}.
    remote_peers: list[dict[str, str]] = field(default_factory=list)

    @property
    def default(self) -> str:
        return self.models[0]


def _names(value: object) -> list[str] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def resolve(config: Agent, slug: str, default_model: str) -> tuple[ModelSet, list[str]]:
    """The agent's models, fallbacks and peers, and every problem with them (for agent/agent.py)."""
    problems: list[str] = []
    models = _names(config.models)
    if models is None:
        problems.append("models must be a list of 'provider:model' ids, e.g. models=['openai:gpt-4.1-mini']")
        models = []
    if config.model and models and config.model not in models:
        problems.append(f"model {config.model!r} is not in models {models}: add it to models, or drop model "
                        "(the first of models is the default)")
    if not models:
        models = [config.model or default_model]
    elif config.model in models:  # model= names the default among models
        models = [config.model] + [m for m in models if m != config.model]
    fallback = _names(config.fallback)
    if fallback is None:
        problems.append("fallback must be a list of 'provider:model' ids")
        fallback = []
    peers, remote_peers = _peers(config.peers, problems)
    for label, ids in (("models", models), ("fallback", fallback)):
        if len(set(ids)) != len(ids):
            problems.append(f"{label} lists a model twice: list each once")
        for model_id in ids:
            try:
                providers.parse_model_id(model_id)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if problem := missing_runtime(model_id):
                problems.append(problem)
            elif label == "fallback" and runtime_of(model_id):
                problems.append(f"fallback {model_id!r} is a whole agent runtime, not a model one step can fall "
                                "over to: list it in models instead")
    for peer in peers:
        if not PEER_SLUG.match(peer):
            problems.append(f"peer {peer!r} is not an agent slug (lowercase letters, digits and '-') nor an agent's "
                            "http(s) URL")
        elif peer == slug:
            problems.append(f"peer {peer!r} is this agent: an agent does not message itself")
    if len(set(peers)) != len(peers):
        problems.append("peers lists an agent twice: list each once")
    if len({peer["url"] for peer in remote_peers}) != len(remote_peers):
        problems.append("peers lists an agent's URL twice: list each once")
    return ModelSet(models, fallback, peers, remote_peers), problems


def _peers(value: object, problems: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """The local peers (slugs) and the remote ones: an agent's URL on an A2A server (its card is at
    `<url>/.well-known/agent-card.json`), alone or as {"url": ..., "token": "${SECRET}"}."""
    if not isinstance(value, (list, tuple)):
        problems.append("peers must be a list of agent slugs or A2A agents' URLs, e.g. peers=['researcher', "
                        "{'url': 'https://agents.example.com/research', 'token': '${RESEARCH_TOKEN}'}]")
        return [], []
    slugs: list[str] = []
    remote: list[dict[str, str]] = []
    for peer in value:
        if isinstance(peer, str) and not PEER_URL.match(peer):
            slugs.append(peer)
            continue
        entry = {"url": peer} if isinstance(peer, str) else peer
        if not isinstance(entry, dict) or set(entry) - {"url", "token"} or not isinstance(entry.get("url"), str):
            problems.append(f"peer {peer!r}: give a slug, a URL, or {{'url': URL, 'token': '${{SECRET}}'}}")
            continue
        url = entry["url"].removesuffix("/.well-known/agent-card.json").rstrip("/")
        if not PEER_URL.match(url):
            problems.append(f"peer {entry['url']!r}: a remote peer's url starts with http:// or https://")
            continue
        token = entry.get("token")
        if token is not None and not (isinstance(token, str) and TOKEN_REF.match(token)):
            problems.append(f"peer {url!r}: token names a secret as '${{NAME}}' (set it with manage.py secrets "
                            "set SLUG NAME), never the token itself")
            continue
        remote.append({"url": url, **({"token": token} if token else {})})
    return slugs, remote
