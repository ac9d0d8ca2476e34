from django.apps import AppConfig
from django.conf import settings
from django.contrib.admin import apps as admin_apps


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "agentsite"

    def ready(self) -> None:
        from agentsite import checks as database_checks  # noqa: F401  registers the checks of the database
        from agentsite import forksafe
        from channels_app import checks  # noqa: F401  registers the system checks of its settings

        forksafe.install()
        if settings.AGENTSITE_BACKUP_SCHEDULE:
            # Imported only then: a backup brings psycopg and the archive code into every worker.
            from agentsite.backups.scheduled import backup_tick, end_abandoned
            from sessions.timers import ticker
            from sessions.turn import extensions

            # Registered before sessions' jobs (this app comes first in INSTALLED_APPS), so it runs first in
            # each pass: it costs them one query at most, since the backup itself runs in a thread of its own.
            ticker.add_job("scheduled backup", backup_tick)
            extensions.add_recovery_step("abandoned backups", end_abandoned, when="backups")


class OperatorsAdminConfig(admin_apps.AdminConfig):
    """Django's admin with its site admitting operators, not only staff (agentsite.admin_site)."""

    default = False  # named in INSTALLED_APPS; agentsite's own app stays AgentsiteConfig
    default_site = "agentsite.admin_site.OperatorsAdminSite"
