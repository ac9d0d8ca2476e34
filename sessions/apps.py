from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # "sessions" is taken by django.contrib.sessions, which the admin needs.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Sessions"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from sessions.recovery import start_sweeper

        post_spawn.connect(start_sweeper, dispatch_uid="agentsite-turn-recovery")
