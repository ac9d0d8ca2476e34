"""What `manage.py qcluster` loads before it forks the turn workers (agents.discovery.warming).

In a process of its own, as the cluster's is: each agent's active release is
loaded and the providers of the models it may call are imported (with what their SDKs import only on
a client's first use), so workers
forked afterwards share them; an earlier release is not loaded.
"""
from __future__ import annotations

import json

from tests.agents.folder_support import make_agent, minimal
from tests.sessions.test_concurrent_appends import run, writer_env
from tests.support import premigrate

CHILD = """
import json, sys
import django
django.setup()
from pathlib import Path
from agents.discovery import deploy_release
from agents.discovery import releases
from agents.models import Agent
first, streamed = (Path(p) for p in sys.argv[1:3])
deploy_release(first)
deploy_release(streamed)
(first / "agent" / "instructions.md").write_text("Second release.")
deploy_release(first)
releases._cache.clear(); releases._releases.clear()
before = {"openai": "openai" in sys.modules, "prices": "genai_prices" in sys.modules}
from agents.discovery.warming import warm_active_releases
warmed = warm_active_releases()
active = {a.slug: a.active_deployment_id for a in Agent.objects.all()}
print(json.dumps({"before": before, "warmed": warmed, "openai": "openai" in sys.modules,
                  "lazy": [m in sys.modules for m in ("openai.resources.chat.chat", "httpcore2")],
                  "prices": "genai_prices" in sys.modules,
                  "loaded": sorted(pk for pk, _ in releases._cache), "active": sorted(active.values())}))
"""


def test_the_active_releases_and_their_providers_are_loaded_before_the_workers_start(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    premigrate(state)
    first = make_agent(tmp_path / "agents", minimal(), name="first")
    streamed = make_agent(tmp_path / "agents", minimal(**{"agent/agent.py": """
        from agents.sdk import Agent
        agent = Agent(model="openai:gpt-4o-mini", fallback=["scripted:echo"])
    """}), name="streamed")
    out = json.loads(run(CHILD, writer_env(state, None), str(first), str(streamed)))
    assert out["before"] == {"openai": False, "prices": False}  # nothing had imported the SDK: warming did
    assert out["warmed"] == ["first", "streamed"] and out["openai"] is True
    assert out["lazy"] == [True, True]  # what the SDK imports on a client's first use, imported here too
    assert out["prices"] is True  # an OpenAI model's calls are priced from the table
    assert out["loaded"] == out["active"]  # the active releases only: not first's v1
