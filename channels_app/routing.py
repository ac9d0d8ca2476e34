"""Websocket routes (the session event consumer arrives with the playground)."""
websocket_urlpatterns: list = []
