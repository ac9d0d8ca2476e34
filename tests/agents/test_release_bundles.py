"""A release's files live in the database: any host unpacks them under its own state root and runs them."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agents.discovery import ReleaseUnavailable, content_hash, deploy_agent_folder, deploy_release, load_deployment
from agents.discovery.bundles import pack, unpack
from agents.discovery.releases import _cache
from agents.models import Deployment, ReleaseBundle
from agents.releasediff import sections
from sessions.models import Event
from tests.agents.release_support import write_release
from tests.support import ROOT, child_env, postgres_database, premigrate

EXAMPLE = ROOT / "examples" / "support"


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=child_env(**env),
                          capture_output=True, text=True, timeout=180)


def forget_loaded_releases() -> None:
    _cache.clear()


def test_a_release_deployed_on_one_host_runs_on_another_that_never_saw_its_folder(tmp_path):
    folder = tmp_path / "support"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_database(migrated=True))
        first, second = tmp_path / "host-a", tmp_path / "host-b"
        deployed = manage({"AGENTSITE_STATE_ROOT": str(first), "DATABASE_URL": database}, "deploy", str(folder),
                          "--json")
        assert deployed.returncode == 0, deployed.stderr
        content_hash = json.loads(deployed.stdout)["contentHash"]
        # Neither the source nor the deploying host's state root is readable from the other host.
        shutil.rmtree(folder)
        shutil.rmtree(first)

        ran = manage({"AGENTSITE_STATE_ROOT": str(second), "DATABASE_URL": database},
                     "run", "support", "-m", "where is my order?")

        assert ran.returncode == 0, ran.stderr
        assert "Traceback" not in ran.stderr, ran.stderr
        unpacked = second / "deployments" / "support" / content_hash[:16] / "agent"
        assert (unpacked / "instructions.md").read_text() == (EXAMPLE / "agent" / "instructions.md").read_text()
        assert not list(unpacked.parent.parent.glob(".*.tmp"))  # no half-written copy left behind


@pytest.mark.django_db
def test_the_release_row_names_its_folder_relative_to_the_state_root(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "state"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help."))

    assert not Path(deployment.snapshot_path).is_absolute()
    assert deployment.snapshot_dir() == tmp_path / "state" / deployment.snapshot_path
    assert ReleaseBundle.objects.get(deployment=deployment).size > 0


@pytest.mark.django_db
def test_a_process_with_another_state_root_unpacks_the_release_from_the_database(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help.\nBe brief."))
    shutil.rmtree(tmp_path / "helper")
    settings.STATE_ROOT = tmp_path / "b"
    forget_loaded_releases()

    loaded = load_deployment(Deployment.objects.get(pk=deployment.pk))

    assert loaded.instructions.startswith("You help.")
    assert loaded.root == (tmp_path / "b" / deployment.snapshot_path).resolve()


def test_packing_the_same_files_gives_the_same_bytes(tmp_path):
    root = write_release(tmp_path / "helper", "You help.", tools="def shout(text: str) -> str:\n    return text\n")
    first = pack(root)
    (root / "agent" / "instructions.md").touch()  # a newer time, the same content

    assert pack(root) == first


@pytest.mark.django_db
def test_a_corrupted_bundle_is_a_clear_error_naming_the_release(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help."))
    ReleaseBundle.objects.filter(deployment=deployment).update(data=b"not a tar.gz")
    settings.STATE_ROOT = tmp_path / "b"
    forget_loaded_releases()

    with pytest.raises(ReleaseUnavailable, match="release helper v1: its stored files cannot be unpacked"):
        load_deployment(Deployment.objects.get(pk=deployment.pk))
    assert not (tmp_path / "b" / deployment.snapshot_path).exists()


@pytest.mark.django_db
def test_a_bundle_of_other_files_is_refused_by_the_content_hash(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help."))
    other = pack(write_release(tmp_path / "other", "You do something else."))
    ReleaseBundle.objects.filter(deployment=deployment).update(data=other)
    settings.STATE_ROOT = tmp_path / "b"
    forget_loaded_releases()

    with pytest.raises(ReleaseUnavailable, match="release helper v1: its stored files do not match its content hash"):
        load_deployment(Deployment.objects.get(pk=deployment.pk))
    assert not (tmp_path / "b" / deployment.snapshot_path).exists()


@pytest.mark.django_db
def test_a_release_with_no_stored_files_elsewhere_is_a_clear_error(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help."))
    ReleaseBundle.objects.filter(deployment=deployment).delete()
    settings.STATE_ROOT = tmp_path / "b"
    forget_loaded_releases()

    with pytest.raises(ReleaseUnavailable, match="release helper v1: its files are not stored in the database"):
        load_deployment(Deployment.objects.get(pk=deployment.pk))


@pytest.mark.django_db
def test_an_older_release_without_a_bundle_still_runs_on_the_host_holding_its_snapshot(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    deployment = deploy_agent_folder(write_release(tmp_path / "helper", "You help."))
    # As an earlier version left it: an absolute snapshot path and nothing in the database.
    Deployment.objects.filter(pk=deployment.pk).update(snapshot_path=str(deployment.snapshot_dir()))
    ReleaseBundle.objects.filter(deployment=deployment).delete()
    settings.STATE_ROOT = tmp_path / "elsewhere-on-this-host"
    forget_loaded_releases()

    loaded = load_deployment(Deployment.objects.get(pk=deployment.pk))

    assert loaded.root == (tmp_path / "a" / "deployments" / "helper" / deployment.content_hash[:16]).resolve()


@pytest.mark.django_db
def test_deploying_the_same_content_again_reuses_the_release_and_stores_its_missing_files(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    root = write_release(tmp_path / "helper", "You help.")
    first = deploy_agent_folder(root)
    ReleaseBundle.objects.filter(deployment=first).delete()
    shutil.rmtree(first.snapshot_dir())

    again = deploy_release(root)

    assert (again.deployment.pk, again.reused) == (first.pk, True)
    assert ReleaseBundle.objects.filter(deployment=first).exists()


@pytest.mark.django_db
def test_the_release_diff_reads_files_from_the_database_on_a_host_without_them(tmp_path, settings):
    settings.STATE_ROOT = tmp_path / "a"
    root = tmp_path / "helper"
    old = deploy_agent_folder(write_release(root, "You help.\nBe brief."))
    new = deploy_agent_folder(write_release(root, "You help.\nBe thorough."))
    settings.STATE_ROOT = tmp_path / "b"

    files = sections(Deployment.objects.get(pk=new.pk))["files"]

    assert "=== agent/instructions.md" in files and "Be thorough." in files
    assert "Be brief." in sections(Deployment.objects.get(pk=old.pk))["files"]


def test_a_release_over_the_size_limit_is_a_one_line_deploy_error(tmp_path):
    root = write_release(tmp_path / "helper", "You help.")
    (tmp_path / "state").mkdir()
    premigrate(tmp_path / "state")  # the refusal, not the first migrate, is what is tested
    done = manage({"AGENTSITE_STATE_ROOT": str(tmp_path / "state"), "AGENTSITE_RELEASE_MAX_BYTES": "64"},
                  "deploy", str(root))

    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert "over the limit of 64 bytes (AGENTSITE_RELEASE_MAX_BYTES)" in done.stderr
    assert not (tmp_path / "state" / "deployments").exists()


def test_processes_racing_to_unpack_a_release_all_get_the_whole_folder(tmp_path):
    root = write_release(tmp_path / "helper", "You help.", tools="def shout(text: str) -> str:\n    return text\n")
    data, expected = pack(root), content_hash(root)
    target = tmp_path / "state" / "deployments" / "helper" / expected[:16]

    with ThreadPoolExecutor(max_workers=6) as pool:
        found = list(pool.map(lambda _: unpack(data, target, expected, "helper v1"), range(6)))

    assert found == [target] * 6
    assert content_hash(target) == expected
    assert not list(target.parent.glob(".*.tmp"))


@pytest.mark.django_db(transaction=True)
def test_a_turn_on_a_host_that_cannot_unpack_the_release_fails_naming_it(alice, support_agent, sync_turns, settings,
                                                                        tmp_path):
    ReleaseBundle.objects.filter(deployment=support_agent.active_deployment).update(data=b"not a tar.gz")
    settings.STATE_ROOT = tmp_path / "another-host"
    forget_loaded_releases()

    response = alice.post("/support/v1/session", json.dumps({"message": "hello"}), content_type="application/json")

    assert response.status_code == 201, response.content
    failed = Event.objects.get(session_id=response.json()["sessionId"], type="turn.failed").data
    assert failed["code"] == "internal_error"
    assert "release support v1: its stored files cannot be unpacked" in failed["error"]
