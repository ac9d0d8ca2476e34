"""deploy/systemd: the units verify, keep the sandbox working, and their commands serve a session.

The units name the checkout as /opt/agentsite; the tests render them with this
checkout's path instead, as `systemd-analyze verify` checks that each command
exists. The commands themselves run here as plain processes, with the
settings of deploy/agentsite.env.example: no systemd is needed to run them.
"""
from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from tests.sessions.test_live_stream import is_type, read_ndjson
from tests.support import ROOT, child_env, free_port

UNITS = ROOT / "deploy" / "systemd"
ENV_EXAMPLE = ROOT / "deploy" / "agentsite.env.example"
INSTALL_PATH = "/opt/agentsite"
# Options that take away what bubblewrap needs (namespaces, mount, a fresh /proc): see the units' comments.
BREAK_THE_SANDBOX = {"RestrictNamespaces", "PrivateUsers", "SystemCallFilter", "ProtectKernelTunables",
                     "ProtectKernelLogs", "ProtectProc", "ProcSubset", "PrivateDevices"}


def rendered(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for unit in sorted(UNITS.iterdir()):
        text = unit.read_text()
        assert INSTALL_PATH in text or unit.suffix == ".target", f"{unit.name} no longer names {INSTALL_PATH}"
        out.append(folder / unit.name)
        out[-1].write_text(text.replace(INSTALL_PATH, str(ROOT)))
    return out


def service(name: str) -> dict[str, list[str]]:
    """A unit's [Service] settings (each key with every value it is given), checkout path substituted."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in (UNITS / name).read_text().replace(INSTALL_PATH, str(ROOT)).splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def environment(unit: dict[str, list[str]], file_values: dict[str, str]) -> dict[str, str]:
    """What systemd gives the unit's commands: Environment=, then the environment file over it."""
    env = dict(item.split("=", 1) for line in unit.get("Environment", []) for item in shlex.split(line))
    return {**env, **file_values}


def command(line: str, env: dict[str, str]) -> list[str]:
    """An ExecStart= line as systemd expands it: `${X}` is one word, a lone `$X` splits on whitespace."""
    words = []
    for word in line.split():
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            words.extend(env[word[1:]].split())
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return words


def env_file_values(**overrides: str) -> dict[str, str]:
    values = dict(line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
                  if line and not line.startswith("#"))
    return {**values, **overrides}


def test_the_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (.ci/run installs Debian's systemd)")
    units = rendered(tmp_path / "units")

    done = subprocess.run([analyze, "verify", "--man=no", *map(str, units)], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == "", "systemd reads the units without a warning"


@pytest.mark.parametrize("name", ["agentsite-web.service", "agentsite-worker.service"])
def test_the_long_running_units_are_hardened_but_leave_the_sandbox_its_namespaces(name):
    unit = service(name)

    assert unit["User"] == ["agentsite"] and unit["NoNewPrivileges"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"] and unit["Restart"] == ["on-failure"]
    assert unit["EnvironmentFile"] == ["/etc/agentsite/agentsite.env"]
    assert not BREAK_THE_SANDBOX & set(unit)
    # systemd's default soft limit (1024) is too few for parallel shell calls walking deep workspaces, streams,
    # and the database's and Redis's connections together.
    assert unit.get("LimitNOFILE") == ["65536"]


def test_the_units_commands_migrate_deploy_and_serve_a_session(tmp_path):
    port = free_port()
    state = tmp_path / "state"
    file_values = env_file_values(AGENTSITE_SECRET_KEY=secrets.token_urlsafe(50),
                                  AGENTSITE_SECRETS_KEYS=Fernet.generate_key().decode(),
                                  AGENTSITE_PUBLIC_URL=f"http://127.0.0.1:{port}", AGENTSITE_PORT=str(port))
    units = {name: service(f"agentsite-{name}.service") for name in ("prepare", "web", "worker")}
    envs = {name: {**environment(unit, file_values), "AGENTSITE_STATE_ROOT": str(state)} for name, unit in units.items()}

    def prepare(line: str, env: dict[str, str]) -> str:
        done = subprocess.run(command(line, env), cwd=units["prepare"]["WorkingDirectory"][0],
                              env={**child_env(), **env}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        return done.stdout

    state.mkdir()  # empty, as on a new install: the prepare unit's migrate and createcachetable make it
    # As installed, the environment file names no agent folder: the examples are not deployed.
    said = [prepare(line, envs["prepare"]) for line in units["prepare"]["ExecStart"]]
    assert "AGENTSITE_AGENT_DIRS" not in file_values and "nothing deployed" in said[-1]
    assert (state / "static" / "admin" / "css" / "base.css").is_file()
    # The operator names a folder: that agent alone.
    deploy_line = next(line for line in units["prepare"]["ExecStart"] if " deploy " in line)
    named = {**envs["prepare"], "AGENTSITE_AGENT_DIRS": str(ROOT / "examples" / "support")}
    assert prepare(deploy_line, named).startswith("support: v1 ")

    running = {name: subprocess.Popen(command(units[name]["ExecStart"][0], envs[name]),
                                      cwd=units[name]["WorkingDirectory"][0], env={**child_env(), **envs[name]},
                                      stdout=open(tmp_path / f"{name}.log", "wb"), stderr=subprocess.STDOUT,
                                      start_new_session=True)
               for name in ("web", "worker")}
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert running["web"].poll() is None, (tmp_path / "web.log").read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "web.log").read_text()
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=20) as client:
            assert [a["slug"] for a in client.get("/v1/agents").json()["agents"]] == ["support"]
            created = client.post("/support/v1/session", json={"message": "hello from systemd"})
            assert created.status_code == 201, created.text
            events = read_ndjson(client, f"/support/v1/session/{created.json()['sessionId']}/stream",
                                 until=is_type("session.waiting"))
            assert "turn.completed" in [e["type"] for e in events], events[-3:]
    finally:
        # As KillMode=mixed stops them: SIGTERM to the main process, then SIGKILL to what is left.
        for process in running.values():
            process.send_signal(signal.SIGTERM)
        for process in running.values():
            try:
                process.wait(timeout=30)
            finally:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
