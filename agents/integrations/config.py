"""Provider configuration: which credentials (by name) hold the secrets.

A config object stores credential *names*, never values; values are read each
time they are needed, from the agent's secrets and then the environment
(agents.secrets.lookup), so a rotated secret is picked up and a config can be
printed, logged or shown in `/info` safely. `describe()` says which names are
set, never what they hold.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping
from agents.redaction import without_credentials
from agents.secrets.lookup import credentials


@dataclass(frozen=True)
class ProviderConfig:
    """Fields ending in `_env` name the credentials holding secrets (an agent secret or an environment variable).

    `environ` replaces that lookup (tests); it is never shown.
    """

    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False, kw_only=True)

    def env(self, name: str) -> str | None:
        """The credential `name` (the agent's secret, else the environment), or None when unset or blank."""
        source = self.environ if self.environ is not None else credentials
        value = source.get(name)
        return value if value and value.strip() else None

    def api_base_from(self, env_name: str, default: str) -> str:
        """The configured `api_url`, else the environment variable `env_name`, else `default`; no trailing slash."""
        return (getattr(self, "api_url", "") or self.env(env_name) or default).rstrip("/")

    def secret(self, field_name: str) -> str | None:
        """The value of the variable a `*_env` field names."""
        return self.env(getattr(self, field_name))

    def describe(self) -> dict[str, Any]:
        """Every variable name with whether it is set, and the non-secret settings."""
        described: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "environ":
                continue
            value = getattr(self, f.name)
            if f.name.endswith("_env"):
                described[f.name] = {"env": value, "set": self.env(value) is not None}
            elif isinstance(value, str):
                described[f.name] = without_credentials(value)
            else:
                described[f.name] = value
        return described
