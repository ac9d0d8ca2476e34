from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # "sessions" is taken by django.contrib.sessions, which the admin needs.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Sessions"
