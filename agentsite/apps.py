from django.apps import AppConfig


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "agentsite"

    def ready(self) -> None:
        from agentsite import forksafe

        forksafe.install()
