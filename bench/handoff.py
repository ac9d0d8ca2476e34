#!/usr/bin/env python
"""How long a handoff takes on a 200-message session: the review, then the handoff itself.

In process, on a fresh database (SQLite in a temp state root, or PostgreSQL with
`--postgres`). It deploys an agent that may run on `anthropic:claude-bench` and
`openai:gpt-bench`, and for each round makes a session bound to Anthropic whose
conversation holds `--messages` messages (rounds of a question, a reply with a
signed thinking block and a tool call, its result, and an answer), then times:

  review    `sessions.handoff.review` (what GET .../handoff?to= runs);
  perform   `sessions.handoff.perform` (what POST .../handoff runs): the lock,
            the write-ahead record, the transcript re-made for OpenAI, the
            confirming call to the target, and the commit;
  total     both.

The target is a loopback server speaking the OpenAI protocol, reached through
the real `openai` client (its answer is immediate, so the figure is this
server's own cost plus one local HTTP round trip, most of it the client
building a request of the whole history); `--target scripted` hands over to
the offline model instead (no confirming call). A first, untimed round
imports the provider's SDK, as a server process does once.

    .venv/bin/python bench/handoff.py
    .venv/bin/python bench/handoff.py --rounds 50 --messages 400 --postgres

Target: under 2 s per handoff, review included.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import inprocess  # noqa: E402
from bench.inprocess import drop  # noqa: E402

SOURCE = "anthropic:claude-bench"
TARGETS = {"openai": "openai:gpt-bench", "scripted": "scripted:bench"}


def setup(postgres: bool) -> str | None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-bench")
    return inprocess.setup("handoff", postgres)


def conversation(count: int) -> list[dict]:
    messages: list[dict] = []
    n = 0
    while len(messages) < count:
        call_id = f"toolu_bench{n:05d}"
        messages += [
            {"role": "user", "content": f"Where is order A{n:04d}? " + "Some context. " * 20},
            {"role": "assistant", "content": "", "reasoning": "I should look it up. " * 10,
             "reasoningSignature": "sig-" + "x" * 200,
             "toolCalls": [{"id": call_id, "name": "lookup_order", "input": {"order_id": f"A{n:04d}"}}]},
            {"role": "tool", "callId": call_id, "name": "lookup_order", "content": '{"status": "shipped"}',
             "isError": False},
            {"role": "assistant", "content": f"Order A{n:04d} has shipped. " + "Details follow. " * 15},
        ]
        n += 1
    return messages[:count]


def deploy(models: list[str]):
    import shutil

    from agents.discovery import deploy_agent_folder

    folder = Path(tempfile.mkdtemp(prefix="handoff-agent-")) / "duo"
    shutil.copytree(ROOT / "examples" / "support" / "agent", folder / "agent",
                    ignore=shutil.ignore_patterns("__pycache__", "ab.py"))
    (folder / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(models={models!r}, description='bench', tools=[])\n")
    return deploy_agent_folder(folder).agent


def idle_session(agent, messages: list[dict]):
    """A session bound to the source, idle, holding `messages` (its first turn marked done)."""
    from sessions.turn.admission import start_session
    from sessions.models import Session, Turn
    from sessions.principal import Principal

    admitted = start_session(agent, Principal(authenticator="bench", principal_id="bench"), "hello")
    Turn.objects.filter(pk=admitted.turn.pk).update(status=Turn.Status.COMPLETED)
    Session.objects.filter(pk=admitted.session.pk).update(active_turn=None, status=Session.Status.WAITING,
                                                          conversation=messages)
    return Session.objects.select_related("agent", "deployment").get(pk=admitted.session.pk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--target", choices=sorted(TARGETS), default="openai")
    parser.add_argument("--postgres", action="store_true")
    options = parser.parse_args()
    dbname = setup(options.postgres)
    try:
        run(options)
    finally:
        if dbname:
            drop(dbname)


def run(options) -> None:
    from django_q.conf import Conf

    from sessions.handoff import perform, review
    from tests.providers.loopback import LoopbackModelServer, Reply, oa_text

    Conf.SYNC = False  # nothing is queued behind the handoff; no worker is needed
    target = TARGETS[options.target]
    agent = deploy([SOURCE, target])
    messages = conversation(options.messages)
    timings: dict[str, list[float]] = {"review": [], "perform": [], "total": []}
    with LoopbackModelServer("openai") as server:
        os.environ["OPENAI_BASE_URL"] = server.url + "/v1"
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        for round_ in range(options.rounds + 1):  # the first round, untimed, imports the provider's SDK
            session = idle_session(agent, messages)
            server.replies.append(Reply(events=oa_text("OK")))
            started = time.perf_counter()
            reviewed = review(session, target)
            reviewed_at = time.perf_counter()
            done = perform(session, target, reviewed["reviewId"])
            ended = time.perf_counter()
            assert done.status == "completed", done.status
            if round_ == 0:
                continue
            timings["review"].append((reviewed_at - started) * 1000)
            timings["perform"].append((ended - reviewed_at) * 1000)
            timings["total"].append((ended - started) * 1000)
        sent = len(server.requests)
    database = "PostgreSQL" if options.postgres else "SQLite"
    print(f"handoff {SOURCE} -> {target}, {options.messages} messages, {options.rounds} rounds, {database}"
          f" ({sent} confirming calls, the first untimed)")
    for name, values in timings.items():
        ordered = sorted(values)
        p95 = ordered[max(0, round(len(ordered) * 0.95) - 1)]
        print(f"  {name:8s} p50 {statistics.median(values):8.1f} ms   p95 {p95:8.1f} ms   max {max(values):8.1f} ms")
    verdict = "under" if max(timings["total"]) < 2000 else "OVER"
    print(f"  target: every handoff under 2 s, review included: {verdict}")


if __name__ == "__main__":
    main()
