"""ASGI entry point: HTTP through Django, websockets through Channels."""
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
# Django must be set up before anything imports models (consumers do).
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402

from agentsite.threads import PooledThreadsASGIHandler  # noqa: E402

django_asgi_app = PooledThreadsASGIHandler(settings.AGENTSITE_WEB_THREADS)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from channels_app.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The session cookie of an admin login is a principal on websockets too.
        "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
    }
)
