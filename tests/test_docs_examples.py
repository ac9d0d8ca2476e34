"""Docs that run: the shell examples of README.md and docs/ marked runnable, run against a live server.

The mark is the fence's info string: a block opened with ```` ```bash runnable ```` is runnable
(the first word keeps it highlighted as bash everywhere). The runnable blocks of one file run in
order in one `bash` process under `set -euo pipefail`, so a block may use the shell variables an
earlier one set (`$session`, `$token`), as a reader pasting them into one shell would;
`http://127.0.0.1:8000` becomes the test server's address. Each block must exit 0 and print one or
more JSON values (a document, or NDJSON lines: a stream's events), none an error body. Blocks that
cannot run against `serve` on the embedded default (a real model, production settings, a live stream
left with Ctrl-C) stay plain ```` ```bash ````. docs/writing-docs.md says the same for writers.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from channels_app.docs.pages import markdown
from tests.support import child_env, run_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOC_URL = "http://127.0.0.1:8000"
MARK = "@@docs-example-block@@"
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks(path: Path) -> list[str]:
    tokens = markdown(served=False).parse(path.read_text(encoding="utf-8"))
    return [t.content for t in tokens if t.type == "fence" and t.info.split()[:2] == ["bash", "runnable"]]


def json_values(text: str) -> list:
    """Every JSON value in `text`, one after another (a document, NDJSON lines, or several documents)."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        value, at = decoder.raw_decode(text, at)  # a ValueError names where the text is not JSON
        values.append(value)


WITH_EXAMPLES = [p for p in FILES if runnable_blocks(p)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_server(tmp_path_factory.mktemp("docs-examples")) as live:
        yield live


def test_the_first_sessions_are_marked_runnable():
    assert len(runnable_blocks(ROOT / "README.md")) >= 3
    assert len(runnable_blocks(ROOT / "docs" / "http-api.md")) >= 8


@pytest.mark.parametrize("path", WITH_EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_runnable_examples_run(server, path, tmp_path):
    blocks = runnable_blocks(path)
    script = "set -euo pipefail\n" + "".join(
        f"printf '\\n{MARK}\\n'\n{block.replace(DOC_URL, server.base_url)}\n" for block in blocks)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                          timeout=90)
    outputs = done.stdout.split(f"\n{MARK}\n")[1:]
    ran = len(outputs)
    assert done.returncode == 0, (f"block {ran} of {path.name} failed ({done.returncode}):\n{blocks[ran - 1]}\n"
                                  f"stdout: {outputs[-1] if outputs else ''}\nstderr: {done.stderr}")
    assert ran == len(blocks)
    for number, (block, output) in enumerate(zip(blocks, outputs), 1):
        try:
            values = json_values(output)
        except ValueError as exc:
            raise AssertionError(f"block {number} of {path.name} printed what is not JSON ({exc}):\n{output}")
        assert values, f"block {number} of {path.name} printed nothing:\n{block}"
        errors = [v for v in values if isinstance(v, dict) and "error" in v]
        assert not errors, f"block {number} of {path.name} answered an error: {errors}\n{block}"
