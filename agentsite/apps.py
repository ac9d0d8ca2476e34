from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "agentsite"

    def ready(self) -> None:
        from agentsite import checks as database_checks  # noqa: F401  registers the checks of the database
        from agentsite import forksafe
        from channels_app import checks  # noqa: F401  registers the system checks of its settings

        forksafe.install()


class OperatorsAdminConfig(admin_apps.AdminConfig):
    """Django's admin with its site admitting operators, not only staff (agentsite.admin_site)."""

    default = False  # named in INSTALLED_APPS; agentsite's own app stays AgentsiteConfig
    default_site = "agentsite.admin_site.OperatorsAdminSite"
