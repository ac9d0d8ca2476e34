"""A release's allowed domains: the rules a list follows, and the outbound calls they hold in."""
from __future__ import annotations

import json

import pytest

from agents.discovery import AgentFolderError, deploy_release, load_agent_folder
from agents.integrations.outbound import DomainError, OutboundClient, OutboundRefused, check_allowed_domains
from agents.integrations.outbound import guard
from sessions.turn.admission import AdmissionError
from sessions.direct.calls import call_tool
from sessions.host import Host
from sessions.mcp.declared import refused_by_domains
from sessions.mcp.tools import hub, mcp_tools
from tests.agents.integrations.fakeapi import Answer, FakeAPI


@pytest.mark.parametrize("entry", ["api.example.com", "*.example.com", "a-b.c.example.org", "x.io"])
def test_a_lowercase_hostname_of_two_labels_or_one_leading_wildcard_is_accepted(entry):
    assert check_allowed_domains([entry]) == [entry]


@pytest.mark.parametrize("entry, rule", [
    ("https://api.example.com", "no scheme"),
    ("api.example.com/v1", "no path"),
    ("api.example.com:443", "no port"),
    ("127.0.0.1", "not an IP address"),
    ("::1", "not an IP address"),
    ("[::1]", "not an IP address"),
    ("API.example.com", "lowercase only"),
    ("api.example.com.", "no trailing dot"),
    ("localhost", "at least two labels"),
    ("*.com", "at least two labels"),
    ("a.*.example.com", "one wildcard at most"),
    ("*.*.example.com", "one wildcard at most"),
    ("example.123", "top-level domain is letters only"),
    ("-bad.example.com", "inner hyphens"),
    ("a..example.com", "inner hyphens"),
])
def test_each_broken_rule_is_refused_in_one_line_naming_it(entry, rule):
    with pytest.raises(DomainError) as raised:
        check_allowed_domains([entry])
    assert rule in str(raised.value) and "\n" not in str(raised.value)


def test_at_most_twenty_domains():
    assert len(check_allowed_domains([f"d{i}.example.com" for i in range(20)])) == 20
    with pytest.raises(DomainError, match="at most 20"):
        check_allowed_domains([f"d{i}.example.com" for i in range(21)])


@pytest.fixture
def names_on_loopback(monkeypatch):
    """Every `*.test` name resolves to loopback, which the allowlist admits (the server's own rule)."""
    monkeypatch.setattr(guard, "system_resolver", lambda host, port: ["127.0.0.1"])
    with FakeAPI() as fake:
        fake.route("GET", "/status", Answer(body={"ok": True}))
        yield fake


@pytest.mark.parametrize("domains, url, reached", [
    (("api.example.test",), "http://api.example.test:{port}/status", True),
    (("api.example.test",), "http://other.example.test:{port}/status", False),
    (("*.example.test",), "http://a.example.test:{port}/status", True),
    (("*.example.test",), "http://example.test:{port}/status", False),
    (("api.example.test",), "http://127.0.0.1:{port}/status", False),
    ((), "http://other.example.test:{port}/status", True),
])
def test_the_client_reaches_only_the_allowed_domains(names_on_loopback, domains, url, reached):
    with OutboundClient(allow=["127.0.0.1/32"], domains=domains) as client:
        if reached:
            assert client.get(url.format(port=names_on_loopback.port)).status_code == 200
        else:
            with pytest.raises(OutboundRefused, match="not one of the agent's allowed domains"):
                client.get(url.format(port=names_on_loopback.port))


def test_allowed_domains_never_widen_the_servers_allowlist(names_on_loopback):
    with OutboundClient(allow=[], domains=("api.example.test",)) as client, \
            pytest.raises(OutboundRefused, match="loopback"):
        client.get(f"http://api.example.test:{names_on_loopback.port}/status")


FETCH_TOOL = '''
from pydantic import BaseModel
from agents.integrations.outbound import OutboundError
from agents.sdk import tool

class Input(BaseModel):
    url: str

@tool(description="GET a URL.")
def fetch(input: Input, ctx) -> dict:
    try:
        with ctx.host.http as http:
            return {"status": http.get(input.url, timeout=3).status_code}
    except OutboundError as exc:
        return {"refused": str(exc)}
'''


def fetcher(tmp_path, **files: str):
    root = tmp_path / "fetcher"
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "tools" / "fetch.py").write_text(FETCH_TOOL)
    (root / "agent" / "instructions.md").write_text("Fetch.\n")
    for name, text in files.items():
        (root / "agent" / name).write_text(text)
    return root


@pytest.mark.django_db
def test_a_tools_ctx_host_http_reaches_an_allowed_host_and_not_another(tmp_path, settings, names_on_loopback):
    settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    agent = deploy_release(fetcher(tmp_path), allowed_domains=["api.example.test"]).deployment.agent
    port = names_on_loopback.port

    assert call_tool(agent, "fetch", {"url": f"http://api.example.test:{port}/status"})["output"] == {"status": 200}
    refused = call_tool(agent, "fetch", {"url": f"http://evil.example.test:{port}/status"})["output"]["refused"]
    assert "evil.example.test is not one of the agent's allowed domains" in refused
    assert len(names_on_loopback.requests) == 1


@pytest.mark.django_db
def test_an_mcp_server_over_http_on_another_host_is_never_connected_to(tmp_path):
    root = tmp_path / "remote"
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Notes.\n")
    (root / "agent" / "mcp.json").write_text(json.dumps({"mcpServers": {
        "remote": {"url": "http://mcp.elsewhere.test:1/mcp"}}}))
    loaded = load_agent_folder(root)

    assert mcp_tools(loaded.mcp, loaded.root, ("api.example.test",)) == {}
    assert hub().connections == {}
    agent = deploy_release(root, allowed_domains=["api.example.test"]).deployment.agent
    with pytest.raises(AdmissionError, match="has no tool 'remote__add'"):
        call_tool(agent, "remote__add", {"a": 1, "b": 2})
    assert hub().connections == {}


@pytest.mark.django_db
def test_allowed_domains_with_shell_networking_are_refused_at_deploy(tmp_path):
    root = fetcher(tmp_path, **{"agent.py": "from agents.sdk import Agent, local_runtime\n"
                                "agent = Agent(runtime=local_runtime(network=True))\n"})

    with pytest.raises(AgentFolderError) as raised:
        deploy_release(root, allowed_domains=["api.example.com"])
    assert "local_runtime(network=True)" in str(raised.value.problems[0])
    assert deploy_release(root).deployment.version == 1  # without a list, as before


@pytest.mark.django_db
def test_allowed_domains_with_a_uvx_or_npx_server_are_refused_at_deploy(tmp_path):
    """Such a server fetches its package, so it always has the network, which no list of domains holds."""
    root = fetcher(tmp_path, **{"mcp.json": json.dumps({"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"]}}})})

    with pytest.raises(AgentFolderError) as raised:
        deploy_release(root, allowed_domains=["api.example.com"])
    assert "MCP server 'time'" in str(raised.value.problems[0])
    assert refused_by_domains(load_agent_folder(root).mcp[0], ("api.example.com",)).startswith(
        "MCP server 'time' is refused: the agent's allowed domains cannot be enforced on its network")


@pytest.mark.django_db
def test_the_provider_clients_of_a_release_with_allowed_domains_are_held_to_them(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken-for-tests")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-for-tests")
    agent = deploy_release(fetcher(tmp_path), allowed_domains=["api.github.com"]).deployment.agent
    host = Host(session=None, agent=agent)

    assert host.github.outbound.domains == ("api.github.com",)
    with pytest.raises(OutboundRefused, match="slack.com is not one of the agent's allowed domains"):
        host.slack
