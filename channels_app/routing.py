"""Websocket routes."""
from django.urls import path

from channels_app.consumers import SessionEventsConsumer

websocket_urlpatterns = [
    path("<slug:slug>/v1/session/<str:session_id>/ws", SessionEventsConsumer.as_asgi()),
]
