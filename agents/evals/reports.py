"""What a run reports: the `--json` object, the `--junit` XML, and the table on a terminal."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.evals.costs import Cost, total
from agents.evals.runner import CaseResult


def case_json(result: CaseResult, links: bool) -> dict[str, Any]:
    return {
        "id": result.id,
        "tags": list(result.tags),
        "passed": result.passed,
        "gate": None if result.passed else {"kind": result.gate, "message": result.message},
        "durationSeconds": round(result.duration, 3),
        "sessionId": result.session_id,
        "playgroundUrl": result.playground_url if links else None,
        "toolCalls": [call["toolName"] for call in result.tool_calls],
        "metrics": result.metrics,
        **cost_json(result.cost),
    }


def cost_json(cost: Cost) -> dict[str, Any]:
    return {"costUsd": cost.usd, "unpricedCalls": cost.unpriced_calls}


def run_json(results: list[CaseResult], duration: float, links: bool) -> dict[str, Any]:
    """The `--json` object (its shape is in docs/evals.md)."""
    failed = sum(not r.passed for r in results)
    return {"passed": failed == 0, "total": len(results), "failed": failed, "durationSeconds": round(duration, 3),
            "totals": cost_json(total(r.cost for r in results)), "cases": [case_json(r, links) for r in results]}


def junit_xml(results: list[CaseResult], duration: float) -> bytes:
    """One `<testsuite name="evals">`, a `<testcase>` per case, a `<failure>` per failed gate."""
    failures = sum(r.gate not in (None, "error") for r in results)
    errors = sum(r.gate == "error" for r in results)
    suites = ET.Element("testsuites", name="evals", tests=str(len(results)), failures=str(failures),
                        errors=str(errors), time=f"{duration:.3f}")
    suite = ET.SubElement(suites, "testsuite", name="evals", tests=str(len(results)), failures=str(failures),
                          errors=str(errors), skipped="0", time=f"{duration:.3f}")
    for result in results:
        classname, _, name = result.id.rpartition("/")
        testcase = ET.SubElement(suite, "testcase", name=name, classname=classname.replace("/", ".") or "evals",
                                 time=f"{result.duration:.3f}")
        if not result.passed:
            kind = "error" if result.gate == "error" else "failure"
            element = ET.SubElement(testcase, kind, message=result.message or "", type=result.gate or "")
            element.text = trajectory_text(result)
        if result.session_id:
            ET.SubElement(testcase, "system-out").text = f"session {result.session_id}"
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def trajectory_text(result: CaseResult) -> str:
    """The tool calls a failed case made, one a line: what a person reads first."""
    lines = [f"{call['toolName']}({_short(call['input'])})" for call in result.tool_calls]
    return "\n".join(lines) or "(no tool calls)"


def _short(value: Any, limit: int = 80) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def print_table(results: list[CaseResult], duration: float, out: TextIO, links: bool) -> None:
    # Not on a terminal (CI logs, a pipe): as wide as the text, so a message is never cut or folded.
    terminal = Console(file=out)
    console = Console(file=out, width=terminal.width if terminal.is_terminal else 100_000)
    table = Table(show_lines=False)
    for column in ("case", "result", "gate", "message", "trajectory", "seconds"):
        table.add_column(column)
    for result in results:
        message = result.message or ""
        if not result.passed and links and result.playground_url:
            message += f"\n{result.playground_url}"
        table.add_row(Text(result.id), Text("pass", style="green") if result.passed else Text("FAIL", style="red"),
                      Text(result.gate or ""), Text(message),
                      Text("" if result.passed else trajectory_text(result)), f"{result.duration:.2f}")
    console.print(table)
    failed = sum(not r.passed for r in results)
    spent = cost_text(total(r.cost for r in results))
    console.print(f"{len(results) - failed} passed, {failed} failed in {duration:.1f} s, {spent}")


def cost_text(cost: Cost) -> str:
    """`$0.0123`, `cost unknown`, and the calls left out of it: `(2 calls without a price)`."""
    if cost.usd is None:
        text = "cost unknown"
    else:  # cents, or the first few digits of a sub-cent amount
        text = f"${cost.usd:.2f}" if cost.usd == 0 or cost.usd >= 0.01 else f"${cost.usd:.6f}"
    if cost.unpriced_calls:
        text += f" ({cost.unpriced_calls} call{'s' if cost.unpriced_calls != 1 else ''} without a price)"
    return text
