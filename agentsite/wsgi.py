"""WSGI entry point (the streaming routes need ASGI; prefer daphne)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
application = get_wsgi_application()
