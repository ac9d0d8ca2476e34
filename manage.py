#!/usr/bin/env python
"""Django's command-line utility for agentsite."""
import gc
import os
import sys


def main() -> None:
    # Django's start makes over 100,000 objects that live as long as the process: collecting garbage while
    # it imports took a seventh of its CPU. The collector is back on once Django is set up (fetch_command).
    collecting = gc.isenabled()
    gc.disable()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    # serve's flags that change a setting, in the environment before the settings load (serve forks its
    # children from this process, so its settings are theirs).
    from agentsite.serve_environment import from_argv

    os.environ.update(from_argv(sys.argv, os.environ))
    from django.core.management import ManagementUtility

    from agentsite.limits import LimitSettingInvalid
    from agentsite.production import ProductionSettingsMissing

    class CommandLine(ManagementUtility):
        def fetch_command(self, subcommand: str):
            if collecting:  # Django is set up: the command runs with the collector as it was
                gc.enable()
            return super().fetch_command(subcommand)

    try:
        CommandLine(sys.argv).execute()
    except (ProductionSettingsMissing, LimitSettingInvalid) as exc:
        # The message says what to set; a traceback through Django's loader would bury it.
        sys.exit(str(exc))
    finally:
        if collecting:
            gc.enable()


if __name__ == "__main__":
    main()
