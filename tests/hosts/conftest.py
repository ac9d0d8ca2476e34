"""The several-hosts tests: a failed test prints the tail of every process's log."""
from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    topo = getattr(item.module, "TOPOLOGY", {}).get("topo")
    if report.when == "call" and report.failed and topo is not None:
        report.sections.append(("logs of the hosts", topo.logs()))
