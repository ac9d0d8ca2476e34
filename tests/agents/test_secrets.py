"""Secrets at rest: the keys they are encrypted with (rotation, a wrong key) and the
credential lookup that reads them (a secret beats the environment, only inside `acting_for`)."""
from __future__ import annotations

import multiprocessing
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from agents.models import Agent, Secret
from agents.secrets.keys import development_key
from agents.secrets.lookup import credential, credentials
from agents.secrets.store import SecretUnreadable, acting_for

KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def agent(db, settings, tmp_path) -> Agent:
    settings.STATE_ROOT = tmp_path  # no development key file: only the configured keys decrypt
    settings.AGENTSITE_SECRETS_KEYS = KEY_A
    return Agent.objects.create(slug="helper", name="Helper")


def rotate() -> str:
    out = StringIO()
    call_command("secrets", "rotate", stdout=out)
    return out.getvalue().strip()


def test_a_secret_is_stored_encrypted_and_read_back(agent):
    assert Secret.put(agent, "API_TOKEN", "tok-123", by="olga") is True
    row = Secret.objects.get()
    assert "tok-123" not in row.ciphertext
    assert Fernet(KEY_A).decrypt(row.ciphertext.encode()) == b"tok-123"
    assert row.reveal() == "tok-123" and row.set_by == "olga" and row.set_at is not None
    assert Secret.put(agent, "API_TOKEN", "tok-456") is False
    assert Secret.objects.get().reveal() == "tok-456"


def test_rotation_moves_every_secret_to_the_new_first_key(agent, settings):
    Secret.put(agent, "API_TOKEN", "tok-123")
    Secret.put(agent, "OTHER", "other-value")

    settings.AGENTSITE_SECRETS_KEYS = f"{KEY_B},{KEY_A}"
    assert rotate() == "re-encrypted 2 of 2 secret(s) with the first key"
    assert rotate() == "re-encrypted 0 of 2 secret(s) with the first key"

    settings.AGENTSITE_SECRETS_KEYS = KEY_B
    with acting_for("helper"):
        assert credential("API_TOKEN") == "tok-123"
        assert credential("OTHER") == "other-value"


def test_a_wrong_key_names_the_secret_and_not_its_value(agent, settings):
    Secret.put(agent, "API_TOKEN", "tok-very-secret")
    settings.AGENTSITE_SECRETS_KEYS = KEY_B

    with acting_for("helper"), pytest.raises(SecretUnreadable) as raised:
        credential("API_TOKEN")
    assert "API_TOKEN" in str(raised.value) and "helper" in str(raised.value)
    assert "tok-very-secret" not in str(raised.value)

    with pytest.raises(CommandError) as refused:
        rotate()
    assert "API_TOKEN" in str(refused.value) and "tok-very-secret" not in str(refused.value)


def test_a_secret_beats_the_environment_inside_acting_for(agent, monkeypatch):
    monkeypatch.setenv("API_TOKEN", "from-env")
    monkeypatch.setenv("ONLY_ENV", "env-only")
    Secret.put(agent, "API_TOKEN", "from-secret")

    with acting_for("helper"):
        assert credential("API_TOKEN") == "from-secret"
        assert credentials["API_TOKEN"] == "from-secret"
        assert credential("ONLY_ENV") == "env-only"
        assert credential("UNSET_ANYWHERE") is None
        assert "UNSET_ANYWHERE" not in credentials
    assert credential("API_TOKEN") == "from-env"  # outside any agent: the environment alone


def test_another_agents_secret_is_not_read(agent, monkeypatch):
    other = Agent.objects.create(slug="other", name="Other")
    Secret.put(other, "API_TOKEN", "others-secret")
    monkeypatch.setenv("API_TOKEN", "from-env")

    with acting_for("helper"):
        assert credential("API_TOKEN") == "from-env"
    with acting_for("other"):
        assert credential("API_TOKEN") == "others-secret"


def test_a_change_counts_from_the_next_scope(agent):
    Secret.put(agent, "API_TOKEN", "first")
    with acting_for("helper"):
        assert credential("API_TOKEN") == "first"
        Secret.put(agent, "API_TOKEN", "second")
        assert credential("API_TOKEN") == "first"  # a turn reads its agent's secrets once
    with acting_for("helper"):
        assert credential("API_TOKEN") == "second"
    Secret.remove(agent, "API_TOKEN")
    with acting_for("helper"):
        assert credential("API_TOKEN") is None


def test_processes_making_the_development_key_at_once_all_get_the_same_one(tmp_path):
    """A fresh state root under several processes: none may read a half-written key, and one key wins."""
    roots = [tmp_path / str(i) for i in range(5)]
    for root in roots:
        root.mkdir()
    context = multiprocessing.get_context("fork")
    with context.Pool(6) as pool:
        for root in roots:
            keys = pool.map(development_key, [root] * 6)
            assert len(set(keys)) == 1
            Fernet(keys[0])  # a whole key
            assert [p.name for p in root.iterdir()] == ["secrets.key"]
            assert (root / "secrets.key").stat().st_mode & 0o777 == 0o600
