"""A management command run as its command line runs it, in the test's own process."""
from __future__ import annotations

import contextlib
import io
import sys

import pytest
from django.core.management import ManagementUtility
from django.db import connections


def run_command_line(*args: str, stdin: str = "") -> tuple[int, str, str]:
    """`manage.py *args`: its argument parsing, output, a CommandError's one line on stderr and its exit code,
    without a new interpreter. Returns (exit code, stdout, stderr).

    Settings are already set up here, so no second `django.setup()`; the database connections stay open
    (a process's exit would close them, the test still uses its own).
    """
    out, err = io.StringIO(), io.StringIO()
    code = 0
    argv = ["manage.py", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.StringIO(stdin))
        patch.setattr(connections, "close_all", lambda: None)
        try:
            ManagementUtility(argv).fetch_command(args[0]).run_from_argv(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()
