from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from channels_app.lockout import count_failed_login

        # A wrong password at a login page counts toward its client's lockout (channels_app.lockout).
        user_login_failed.connect(count_failed_login, dispatch_uid="channels_app.lockout")
