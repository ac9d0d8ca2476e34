from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from channels_app import checks, schema  # noqa: F401  register the system checks and the OpenAPI auth extension
