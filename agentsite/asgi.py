"""ASGI entry point: HTTP through Django, websockets through Channels."""
import gc
import os

import django

from agentsite.lean_imports import import_rest_framework_lean
from agentsite.limits import LimitSettingInvalid
from agentsite.production import ProductionSettingsMissing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
# Without collecting garbage while Django imports the apps: it makes over 100,000 objects that live on,
# and collecting took a seventh of the start's CPU (manage.py does the same).
collecting = gc.isenabled()
gc.disable()
try:
    # Django must be set up before anything imports models (consumers do).
    django.setup(set_prefix=False)
except (ProductionSettingsMissing, LimitSettingInvalid) as exc:
    # The server's own traceback would bury what to set; exit with the message alone.
    raise SystemExit(str(exc)) from None
finally:
    if collecting:
        gc.enable()
import_rest_framework_lean()  # before the views import DRF: without the extras it only probes for

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402

from agentsite.threads import PooledThreadsASGIHandler  # noqa: E402

django_asgi_app = PooledThreadsASGIHandler(settings.AGENTSITE_WEB_THREADS)

from channels_app.access_log import logged  # noqa: E402
from channels_app.door_routes import with_protocol_doors  # noqa: E402
from sessions import tracing  # noqa: E402

# Under AGENTSITE_LOG_FORMAT=json each request's access line is ours (the web servers write none then):
# inside the request's span, so the line has its trace id.
json_logs = settings.LOG_FORMAT == "json"
# The MCP and A2A doors (/mcp, /<slug>/mcp, /<slug>/a2a, the agent cards) are their SDKs'; the rest is Django's.
http_app = with_protocol_doors(django_asgi_app)
http_app = logged(http_app) if json_logs else http_app
if tracing.tracing():
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware  # noqa: E402
    from opentelemetry.metrics import NoOpMeterProvider  # noqa: E402

    # A span per HTTP request (channels_app.request_spans names it by its route); none per message sent,
    # and no HTTP metrics of its own: /metrics counts requests by route already, for less.
    http_app = OpenTelemetryMiddleware(http_app, exclude_spans=["receive", "send"],
                                       meter_provider=NoOpMeterProvider())

from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from django.db import connections  # noqa: E402

from sessions.models import Host  # noqa: E402
from sessions.plumbing.processes import ensure_host_lease  # noqa: E402
from sessions.workspaces.volume import refuse_unshared_volume  # noqa: E402


def _at_start() -> None:
    """With several hosts, sessions' files must be on one volume they all mount: refuse to serve otherwise.
    Then hold this host's lease, so other hosts can tell when it is gone (sessions.plumbing.processes)."""
    try:
        if refuse_unshared_volume():
            ensure_host_lease(Host.Kind.WEB)
    finally:
        connections.close_all()  # this thread's own, which nothing else would close


# uvicorn imports this module on its running event loop, where Django refuses database calls ("cannot
# call this from an async context"); daphne before its loop starts. A thread of its own serves both, and
# the refusal it raises (SystemExit) is raised again here.
with ThreadPoolExecutor(1, thread_name_prefix="start-checks") as _pool:
    _pool.submit(_at_start).result()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from channels_app.origin import AllowedHostsValidator  # noqa: E402
from channels_app.proxies import behind_trusted_proxies  # noqa: E402
from channels_app.routing import websocket_urlpatterns  # noqa: E402

# The host checked as Django checks it for HTTP; then the session cookie of an admin login is a
# principal on websockets too.
websocket_app = AllowedHostsValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))

if os.environ.get("AGENTSITE_MOUNT_CHANNELS") == "1":
    import threading  # noqa: E402

    from channels_app.custom_channels import mount_all  # noqa: E402
    from sessions.custom_channels.connections import keep_connections  # noqa: E402

    # Custom channels' on_start (long-lived transports) as the web process starts, off the import path.
    # Once per web process, not once per deployment: any web process may get a channel's request and
    # mounts the channel then anyway (custom_channels.mount), and a scale-out runs web processes on
    # several hosts that share nothing but the database, so `serve --web-processes N` runs it N times
    # too, the way a deployment of N web hosts would.
    threading.Thread(target=mount_all, name="mount-channels", daemon=True).start()
    # A transport wanted once per deployment (`Channel(connection=...)`: Slack's Socket Mode) is
    # not an on_start: every web process runs the keeper, and a lease in the database elects which
    # one holds each connection (sessions.custom_channels.connections).
    keep_connections()

# A trusted proxy's forwarding headers become the scope's client, scheme and host, for HTTP
# and websockets alike, before anything reads them (channels_app.proxies).
try:
    application = behind_trusted_proxies(ProtocolTypeRouter(
        {
            "http": http_app,
            "websocket": logged(websocket_app) if json_logs else websocket_app,
        }
    ))
except ImproperlyConfigured as exc:  # a bad AGENTSITE_TRUSTED_PROXIES entry, named
    raise SystemExit(str(exc)) from None
