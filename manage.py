#!/usr/bin/env python
"""Django's command-line utility for agentsite."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    from django.core.management import execute_from_command_line

    from agentsite.limits import LimitSettingInvalid
    from agentsite.production import ProductionSettingsMissing

    try:
        execute_from_command_line(sys.argv)
    except (ProductionSettingsMissing, LimitSettingInvalid) as exc:
        # The message says what to set; a traceback through Django's loader would bury it.
        sys.exit(str(exc))


if __name__ == "__main__":
    main()
