"""deploy --repo: a shallow clone of a repository the test makes (two commits, the agent in a subfolder)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent, Deployment
from agents.redaction import scrub, without_credentials
from tests.support import ROOT, child_env


@dataclass
class Repository:
    url: str
    first: str
    second: str


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args], cwd=cwd,
                          env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Repository:
    """A bare repository: v1 (tag) says "You help.", the default branch's head "You help more."."""
    base = tmp_path_factory.mktemp("repo")
    work = base / "work"
    (work / "agents" / "helper" / "agent").mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    (work / "README.md").write_text("Not an agent folder.\n")
    (work / "agents" / "helper" / "agent" / "instructions.md").write_text("You help.\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "first")
    git(work, "tag", "v1")
    first = git(work, "rev-parse", "HEAD")
    (work / "agents" / "helper" / "agent" / "instructions.md").write_text("You help more.\n")
    git(work, "commit", "-qam", "second")
    second = git(work, "rev-parse", "HEAD")
    git(base, "clone", "-q", "--bare", str(work), "helper.git")
    return Repository((base / "helper.git").as_uri(), first, second)


def deploy(*args: str) -> dict:
    out = StringIO()
    call_command("deploy", *args, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_the_default_branch_deploys_with_its_commit_path_and_source(repository):
    release = deploy("--repo", repository.url, "--path", "agents/helper")

    assert release["agent"] == "helper" and release["version"] == 1
    assert (release["source"], release["sourceKind"], release["ref"], release["commit"], release["path"]) == (
        repository.url, "repo", "", repository.second, "agents/helper")
    assert release["active"] and not release["reused"]
    assert Deployment.objects.get().manifest["instructions"] == "You help more."


@pytest.mark.django_db
def test_a_tag_or_a_full_commit_id_deploys_that_commit_and_the_same_content_reuses_its_release(repository):
    tagged = deploy("--repo", repository.url, "--ref", "v1", "--path", "agents/helper")
    head = deploy("--repo", repository.url, "--path", "agents/helper/")
    by_commit = deploy("--repo", repository.url, "--ref", repository.first, "--path", "agents/helper")

    assert (tagged["version"], tagged["ref"], tagged["commit"]) == (1, "v1", repository.first)
    assert Deployment.objects.get(version=1).manifest["instructions"] == "You help."
    assert head["version"] == 2
    assert (by_commit["version"], by_commit["reused"], by_commit["active"]) == (1, True, True)
    assert Agent.objects.get(slug="helper").active_deployment.version == 1


@pytest.mark.django_db
@pytest.mark.parametrize("args, says", [
    (("--path", "agents/missing"), "--path agents/missing: no such folder in"),
    (("--path", "../.."), "--path ../..: outside the repository"),
    ((), "no agent folder (one holding agent/) at its root; pass --path"),
    (("--ref", "no-such-branch", "--path", "agents/helper"), "no branch, tag or commit 'no-such-branch'"),
    (("--ref", "0" * 40, "--path", "agents/helper"), f"no branch, tag or commit '{'0' * 40}'"),
])
def test_a_missing_path_or_unknown_ref_is_a_clear_error(repository, args, says):
    with pytest.raises(CommandError) as raised:
        deploy("--repo", repository.url, *args)
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("url", ["ssh://git@example.com/a.git", "git://example.com/a.git", "http://example.com/a.git",
                                 "git@example.com:a.git", "ext::sh -c touch% /tmp/pwned"])
def test_only_https_and_file_urls_are_taken(url):
    with pytest.raises(CommandError, match=r"an https:// or file:// URL is needed \(ssh is not supported\)"):
        deploy("--repo", url)


@pytest.mark.django_db
def test_credentials_in_the_url_are_never_shown(repository):
    url = "https://deployer:s3cret-token@127.0.0.1:9/team/helper.git"
    with pytest.raises(CommandError) as raised:
        deploy("--repo", url)

    assert "s3cret-token" not in str(raised.value) and "deployer" not in str(raised.value)
    assert "https://127.0.0.1:9/team/helper.git" in str(raised.value)


@pytest.mark.django_db
def test_credentials_reach_git_in_its_environment_never_on_its_command_line(repository, monkeypatch):
    """Any user of the machine can read a process's arguments; only its owner its environment."""
    seen = []
    real_run = subprocess.run

    def spy(command, **kwargs):
        seen.append((command, kwargs["env"]))
        return real_run(command, **kwargs)
    monkeypatch.setattr("agents.discovery.repository.subprocess.run", spy)
    with pytest.raises(CommandError):
        deploy("--repo", "https://deployer:s3cret-token@127.0.0.1:9/team/helper.git")

    [(command, env)] = [(c, e) for c, e in seen if "clone" in c]
    assert "https://127.0.0.1:9/team/helper.git" in command
    assert not any("s3cret" in part or "deployer" in part for part in command)
    expected = base64.b64encode(b"deployer:s3cret-token").decode()
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("http.extraHeader",
                                                                  f"Authorization: Basic {expected}")


def test_public_url_and_scrub_remove_user_and_password():
    url = "https://me:tok3n-value@git.example.com/a.git"
    assert without_credentials(url) == "https://git.example.com/a.git"
    assert without_credentials("file:///srv/a.git") == "file:///srv/a.git"
    said = "fatal: unable to access 'https://me:tok3n-value@git.example.com/a.git/': 403 for tok3n-value"
    assert scrub(said, url) == "fatal: unable to access 'https://git.example.com/a.git/': 403 for ***"


@pytest.mark.django_db
def test_a_link_out_of_the_repository_is_refused(tmp_path):
    work = tmp_path / "work"
    (work / "agent").mkdir(parents=True)
    (work / "agent" / "instructions.md").symlink_to("/etc/hostname")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "a link out")
    git(tmp_path, "clone", "-q", "--bare", str(work), "linked.git")

    with pytest.raises(CommandError, match=r"agent/instructions.md is a link to outside the repository"):
        deploy("--repo", (tmp_path / "linked.git").as_uri())
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("url, password", [
    ("https://user:S3cret/Passw0rd@git.example.com/r.git", "S3cret/Passw0rd"),
    ("https://user:S3cret#Passw0rd@git.example.com:8443/r.git", "S3cret#Passw0rd"),
    ("https://user:S3cret?Passw0rd@[2001:db8::1]/r.git", "S3cret?Passw0rd"),
    ("https://user:p@S3cret/Passw0rd@git.example.com/r.git?ref=a@b", "p@S3cret/Passw0rd"),
])
def test_credentials_holding_reserved_characters_are_removed_from_urls_and_text(url, password):
    shown = without_credentials(url)
    # What a program may echo: the URL quoted, the password alone, the URL again in a sentence.
    said = f"fatal: unable to access '{url}/': Could not resolve host: user ({password}); also {url}"

    assert "S3cret" not in shown and "Passw0rd" not in shown and "user" not in shown
    assert "S3cret" not in scrub(said, url) and "Passw0rd" not in scrub(said, url)
    assert "S3cret" not in scrub(f"see {url} and more") and "Passw0rd" not in scrub(f"see '{url}': failed")


def deploy_command(tmp_path: Path, url: str) -> subprocess.CompletedProcess:
    """`manage.py deploy --repo URL` as a person runs it, every logger at DEBUG on its stderr."""
    return subprocess.run([os.sys.executable, str(ROOT / "manage.py"), "deploy", "--repo", url, "--path", "agents/helper"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"), AGENTSITE_LOG_LEVEL="DEBUG"))


@pytest.mark.parametrize("credentials", ["deployer:S3cret/Passw0rd", "deployer:S3cret#Passw0rd",
                                         "deployer:S3cret?Passw0rd", "deployer:S3cret%2FPassw0rd"])
def test_deploy_never_prints_a_password_whatever_it_holds(tmp_path, credentials):
    # Port 9 of loopback refuses connections: git fails, and says so, after the URL is checked.
    done = deploy_command(tmp_path, f"https://{credentials}@127.0.0.1:9/team/helper.git")

    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "127.0.0.1:9/team/helper.git" in said, said
    assert "S3cret" not in said and "Passw0rd" not in said and "deployer" not in said, said
    assert "Traceback" not in said


def test_deploy_from_a_local_repository_shows_its_url_without_credentials(tmp_path, repository):
    path = repository.url.removeprefix("file://")
    done = deploy_command(tmp_path, f"file://deployer:S3cret/Passw0rd@{path}")
    assert done.returncode != 0 and "percent-encode" in done.stderr, done.stderr

    done = deploy_command(tmp_path, f"file://deployer:S3cret-Passw0rd@{path}")

    assert done.returncode == 0, done.stderr
    assert f"from {repository.url}" in done.stdout
    assert "S3cret" not in done.stdout + done.stderr and "deployer" not in done.stdout + done.stderr
