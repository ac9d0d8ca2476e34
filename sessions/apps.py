from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # "sessions" is taken by django.contrib.sessions, which the admin needs.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Sessions"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models, which
        # cannot load before the app registry is ready.
        from django_q.signals import post_spawn

        from agents.signals import deployment_activated
        from sessions import tracing
        from sessions.custom_channels.delivery import register as custom_channels
        from sessions.direct.calls import register as direct_calls
        from sessions.experiments.enrollment import register as experiments
        from sessions.experiments.samples import register as experiment_samples
        from sessions.handoff.perform import register as handoff
        from sessions.harness.tools import register as harness
        from sessions.mcp.check import register as mcp_checks
        from sessions.mcp.tools import register as mcp
        from sessions.messaging.turns import register as messaging
        from sessions.metrics.observer import register as metrics
        from sessions.metrics.turnlog import register as turn_lines
        from sessions.timers import ticker
        from sessions.receivers import sync_deployed_experiments, sync_deployed_schedules
        from sessions.turn.recovery import sweep_and_report
        from sessions.retention.sweep import retention_tick
        from sessions.timers.schedules import tick
        from sessions.workspaces.volume import worker_spawned

        # What each feature adds to a turn (sessions.turn.extensions); the turn room names none of them.
        # Observers in this order: the trace's span is open around the metrics' recording.
        for register in (tracing.register, metrics, turn_lines, experiment_samples, messaging, direct_calls, handoff,
                         custom_channels, mcp, mcp_checks, experiments, harness):
            register()
        # The ticker's jobs, in order: end lost turns first, then fire due timers, then (hourly) retention.
        ticker.add_job("recovery sweep", sweep_and_report)
        ticker.add_job("timer tick", tick)
        ticker.add_job("retention", retention_tick)
        if tracing.wanted():  # OpenTelemetry, in every process: web and workers
            tracing.configure()
        post_spawn.connect(worker_spawned, dispatch_uid="agentsite-turn-recovery")
        deployment_activated.connect(sync_deployed_schedules, dispatch_uid="agentsite-sync-schedules")
        deployment_activated.connect(sync_deployed_experiments, dispatch_uid="agentsite-sync-experiments")
