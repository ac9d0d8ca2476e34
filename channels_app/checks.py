"""System checks of this app's settings, run by `manage.py check` (and `check --deploy`) in every mode.

Production refuses the same settings as it loads (agentsite.production); these
say so in development too, where `serve` and the ASGI app would refuse to start.
"""
from __future__ import annotations

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from channels_app.proxies import trusted_networks


@checks.register(checks.Tags.security)
def check_trusted_proxies(app_configs, **kwargs) -> list[checks.CheckMessage]:
    try:
        trusted_networks()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="agentsite.E001")]
    return []
