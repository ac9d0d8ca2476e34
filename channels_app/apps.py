from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from channels_app import schema  # noqa: F401  registers the OpenAPI auth extension
