"""An official SDK's client is built once per process and configuration (agents.providers.base.sdk_client).

Its connection pool then serves every model call of that configuration; a
changed key, base URL, retry count or timeout is another client, and a forked
child builds its own rather than share its parent's sockets.
"""
from __future__ import annotations

import os

import openai

from agents.providers.base import sdk_client

OPTIONS = {"key_env": "OPENAI_API_KEY", "base_url_env": "OPENAI_BASE_URL", "timeout": 120}


def test_the_same_configuration_gets_the_same_client_and_another_one_another(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first")
    params = {"base_url": "http://127.0.0.1:9/v1"}
    first = sdk_client(openai.OpenAI, params, **OPTIONS)
    assert sdk_client(openai.OpenAI, dict(params), **OPTIONS) is first
    assert sdk_client(openai.OpenAI, {**params, "max_retries": 0}, **OPTIONS) is not first
    assert sdk_client(openai.OpenAI, {"base_url": "http://127.0.0.1:10/v1"}, **OPTIONS) is not first

    monkeypatch.setenv("OPENAI_API_KEY", "sk-second")  # a rotated key: a client that sends it
    rotated = sdk_client(openai.OpenAI, params, **OPTIONS)
    assert rotated is not first and rotated.api_key == "sk-second"


def test_a_forked_child_builds_its_own_client(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first")
    params = {"base_url": "http://127.0.0.1:9/v1"}
    parents = sdk_client(openai.OpenAI, params, **OPTIONS)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's client must not be handed out here
        try:
            os.write(write, b"new" if sdk_client(openai.OpenAI, params, **OPTIONS) is not parents else b"same")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.waitpid(pid, 0)
    assert answer == b"new"
