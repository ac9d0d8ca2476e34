#!/usr/bin/env python
"""The GitHub webhook route under load: how fast it answers, and a burst.

It starts the server as bench/turns.py does (web process and worker on a
fresh state root; `pg` on a throwaway PostgreSQL database and a free Redis
db number) with an agent whose `agent/channels/github.py` starts a model turn
for every pull request and comment, and a loopback fake of GitHub's REST API
that records the comments the agent posts back. Deliveries are signed with
`X-Hub-Signature-256` as GitHub signs them.

  answer   --answer deliveries, one at a time, each opening a new pull request
           (a new session): the time from sending the request to its response,
           p50 and p95. The turn itself runs on a worker after the answer.
  burst    --burst distinct deliveries at once from --clients threads: one
           pull request opened per --prs conversations and comments on them,
           shuffled, plus --redeliver copies of deliveries already sent (as
           GitHub redelivers), all racing. Then it waits for the replies and
           checks that every distinct delivery got exactly one reply comment
           (none lost, none doubled) and every redelivery was answered as a
           duplicate.

    .venv/bin/python bench/webhooks.py --config both
    .venv/bin/python bench/webhooks.py --config embedded --answer 100 --burst 200
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import random
import re
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turns import Server, backend, child_env, pct  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SLUG = "hooks"
SECRET = "bench-webhook-secret"
REPO = "octo/bench"
MARK = re.compile(r"mark-[0-9a-f]{32}")

CHANNEL = '''\
from agents.sdk import default_auth, github_channel


def turn(ctx, event):
    return {"auth": default_auth(event)}


channel = github_channel(on_pull_request=turn, on_comment=turn)
'''


class FakeGitHub:
    """Records the comments posted to `/repos/<repo>/issues/<n>/comments`."""

    def __init__(self) -> None:
        self.comments: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                found = re.fullmatch(r"/repos/[^/]+/[^/]+/issues/(\d+)/comments", self.path)
                if found:
                    with fake.lock:
                        fake.comments.append((int(found.group(1)), json.loads(body).get("body", "")))
                        comment_id = len(fake.comments)
                    self.answer(201, {"id": comment_id, "html_url": f"https://github.test/c/{comment_id}"})
                else:
                    self.answer(201 if "/statuses/" in self.path else 404, {})

            do_PATCH = do_POST

            def answer(self, status: int, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def marks(self) -> Counter:
        with self.lock:
            return Counter(m for _, text in self.comments for m in MARK.findall(text))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def agent_folder(root: Path) -> Path:
    folder = root / SLUG
    (folder / "agent" / "channels").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(
        'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[])\n')
    (folder / "agent" / "instructions.md").write_text("Echo what you are told.\n")
    (folder / "agent" / "channels" / "github.py").write_text(CHANNEL)
    return folder


def pull_request(number: int, mark: str) -> tuple[str, dict]:
    repo = {"full_name": REPO, "name": "bench", "owner": {"login": "octo"}}
    return "pull_request", {
        "action": "opened", "number": number, "repository": repo,
        "sender": {"login": "dev", "type": "User"},
        "pull_request": {"number": number, "title": f"Change {number}", "body": mark, "state": "open",
                         "html_url": f"https://github.test/{REPO}/pull/{number}", "user": {"login": "dev"},
                         "head": {"sha": hashlib.sha1(mark.encode()).hexdigest(), "ref": f"b{number}"},
                         "base": {"ref": "main"}},
    }


def comment(number: int, mark: str) -> tuple[str, dict]:
    repo = {"full_name": REPO, "name": "bench", "owner": {"login": "octo"}}
    return "issue_comment", {
        "action": "created", "repository": repo, "sender": {"login": "dev", "type": "User"},
        "issue": {"number": number, "title": f"Change {number}", "state": "open", "user": {"login": "dev"},
                  "html_url": f"https://github.test/{REPO}/pull/{number}",
                  "pull_request": {"url": f"https://api.github.test/repos/{REPO}/pulls/{number}"}},
        "comment": {"id": random.randrange(1, 2**40), "body": mark, "user": {"login": "dev", "type": "User"},
                    "html_url": f"https://github.test/{REPO}/pull/{number}#c"},
    }


class Delivery:
    def __init__(self, event: str, payload: dict, mark: str):
        self.id = str(uuid.uuid4())
        self.event = event
        self.body = json.dumps(payload).encode()
        self.mark = mark

    def headers(self) -> dict[str, str]:
        digest = hmac.new(SECRET.encode(), self.body, hashlib.sha256).hexdigest()
        return {"content-type": "application/json", "x-github-event": self.event, "x-github-delivery": self.id,
                "x-hub-signature-256": f"sha256={digest}", "user-agent": "GitHub-Hookshot/bench"}


def send(client: httpx.Client, d: Delivery) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    r = client.post(f"/{SLUG}/v1/channels/github", content=d.body, headers=d.headers())
    elapsed = (time.perf_counter() - t0) * 1000
    try:
        data = r.json()
    except ValueError:
        data = {}
    return r.status_code, data, elapsed


def new_mark() -> str:
    return f"mark-{uuid.uuid4().hex}"


def wait_for_replies(fake: FakeGitHub, marks: set[str], timeout: float) -> Counter:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = fake.marks()
        if all(seen[m] for m in marks):
            time.sleep(2.0)  # a doubled reply would come right behind the first
            return fake.marks()
        time.sleep(0.2)
    return fake.marks()


def answer_phase(client: httpx.Client, fake: FakeGitHub, n: int, first_number: int) -> dict:
    times, statuses, marks = [], Counter(), set()
    for i in range(n):
        mark = new_mark()
        status, _, ms = send(client, Delivery(*pull_request(first_number + i, mark), mark))
        statuses[status] += 1
        times.append(ms)
        marks.add(mark)
    seen = wait_for_replies(fake, marks, 120)
    return {"deliveries": n, "statuses": dict(statuses), "p50_ms": round(pct(times, 50), 2),
            "p95_ms": round(pct(times, 95), 2), "max_ms": round(max(times), 2),
            "replied": sum(1 for m in marks if seen[m] == 1), "lost": sum(1 for m in marks if not seen[m]),
            "doubled": sum(1 for m in marks if seen[m] > 1)}


def burst_phase(client: httpx.Client, fake: FakeGitHub, args: argparse.Namespace, first_number: int) -> dict:
    deliveries = []
    numbers = [first_number + i for i in range(args.prs)]
    for number in numbers:
        mark = new_mark()
        deliveries.append(Delivery(*pull_request(number, mark), mark))
    while len(deliveries) < args.burst:
        mark = new_mark()
        deliveries.append(Delivery(*comment(random.choice(numbers), mark), mark))
    copies = random.sample(deliveries, min(args.redeliver, len(deliveries)))
    sent = deliveries + copies
    random.shuffle(sent)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        results = list(pool.map(lambda d: (d, *send(client, d)), sent))
    wall = time.perf_counter() - t0
    statuses = Counter(status for _, status, _, _ in results)
    duplicates = sum(1 for _, status, data, _ in results if status < 300 and data.get("duplicate"))
    times = [ms for _, _, _, ms in results]
    marks = {d.mark for d in deliveries}
    seen = wait_for_replies(fake, marks, 300)
    return {"sent": len(sent), "distinct": len(deliveries), "redelivered": len(copies), "clients": args.clients,
            "statuses": dict(statuses), "answered_duplicate": duplicates, "wall_s": round(wall, 2),
            "p50_ms": round(pct(times, 50), 2), "p95_ms": round(pct(times, 95), 2),
            "replied_once": sum(1 for m in marks if seen[m] == 1),
            "lost": sum(1 for m in marks if not seen[m]), "doubled": sum(1 for m in marks if seen[m] > 1)}


def run_config(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    state_root = tmp / name
    state_root.mkdir(parents=True)
    fake = FakeGitHub()
    extra = {"AGENTSITE_STATE_ROOT": str(state_root), "GITHUB_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "bench",
             "GITHUB_API_URL": fake.url, "AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32"}
    report: dict = {"config": name}
    try:
        with backend(name, extra):
            print(f"\n== {name} (state root {state_root})")
            server = Server(ROOT, state_root, child_env(extra), agent_dir=agent_folder(tmp / f"{name}-agent"))
            try:
                server.start()
                limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
                with httpx.Client(base_url=server.base_url, timeout=60, limits=limits) as client:
                    for i in range(5):  # warm: imports, the first connection, the agent's first load
                        mark = new_mark()
                        send(client, Delivery(*pull_request(100_000 + i, mark), mark))
                    report["answer"] = answer_phase(client, fake, args.answer, 1)
                    print(f"  answer: {report['answer']}")
                    report["burst"] = burst_phase(client, fake, args, 10_000)
                    print(f"  burst:  {report['burst']}")
            finally:
                server.stop()
            report["log_errors"] = server.log_errors()
            if report["log_errors"]["lines"]:
                print(f"  ! {report['log_errors']['lines']} error line(s) in the server logs: "
                      f"{report['log_errors']['first'][:3]}")
    finally:
        fake.close()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["embedded", "pg", "both"], default="both")
    parser.add_argument("--answer", type=int, default=200, help="sequential deliveries timed")
    parser.add_argument("--burst", type=int, default=200, help="distinct deliveries in the burst")
    parser.add_argument("--prs", type=int, default=20, help="conversations the burst's comments go to")
    parser.add_argument("--redeliver", type=int, default=50, help="redelivered copies racing in the burst")
    parser.add_argument("--clients", type=int, default=32, help="concurrent senders in the burst")
    parser.add_argument("--out", help="JSON output path (default bench/results/webhooks-<timestamp>.json)")
    args = parser.parse_args()
    configs = ["embedded", "pg"] if args.config == "both" else [args.config]
    reports = []
    with tempfile.TemporaryDirectory(prefix="agentsite-webhooks-") as tmp:
        for name in configs:
            reports.append(run_config(name, args, Path(tmp)))
    print()
    failed = False
    for rep in reports:
        a, b = rep["answer"], rep["burst"]
        clean = not (a["lost"] or a["doubled"] or b["lost"] or b["doubled"]) \
            and b["answered_duplicate"] == b["redelivered"] and not rep["log_errors"]["lines"]
        failed |= not clean
        print(f"{rep['config']:<8} answer p50 {a['p50_ms']} ms p95 {a['p95_ms']} ms | burst of {b['sent']} "
              f"in {b['wall_s']} s: p50 {b['p50_ms']} ms p95 {b['p95_ms']} ms, replied once {b['replied_once']}"
              f"/{b['distinct']}, lost {b['lost']}, doubled {b['doubled']}, duplicates answered "
              f"{b['answered_duplicate']}/{b['redelivered']} -> {'clean' if clean else 'NOT CLEAN'}")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"webhooks-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=2))
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
