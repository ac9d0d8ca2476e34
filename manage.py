#!/usr/bin/env python
"""Django's command-line utility for agentsite."""
import argparse
import gc
import os
import sys
from pathlib import Path


def serve_settings(argv: list[str]) -> dict[str, str]:
    """The environment `serve --state-root DIR` and `serve --production` ask for.

    Settings load once, before the command parses its arguments: set here, they load as asked
    the first time, and serve need not start itself again to reload them (a second Django start).
    """
    if len(argv) < 2 or argv[1] != "serve":
        return {}
    parser = argparse.ArgumentParser(prog="manage.py serve", add_help=False, allow_abbrev=False)
    parser.add_argument("--state-root")
    parser.add_argument("--production", action="store_true")
    known, _ = parser.parse_known_args(argv[2:])
    wanted = {}
    if known.state_root:
        wanted["AGENTSITE_STATE_ROOT"] = str(Path(known.state_root).resolve())
    if known.production:
        wanted["AGENTSITE_ENV"] = "production"
    return wanted


def main() -> None:
    # Django's start makes over 100,000 objects that live as long as the process: collecting garbage while
    # it imports took a seventh of its CPU. The collector is back on once Django is set up (fetch_command).
    collecting = gc.isenabled()
    gc.disable()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.update(serve_settings(sys.argv))
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
