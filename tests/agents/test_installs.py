"""What a program's installation shows a sandboxed server (agents.workspaces.installs), on folders made here.

The servers themselves run in tests/sessions/test_mcp_installed.py; here: which host paths a
virtual environment and its interpreter come to, when the interpreter is named through a
folder of links (`~/.local/bin`, as `uv python install --default` leaves it).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agents.workspaces.installs import InstallError, installation


def environment(tmp_path: Path, executable: Path) -> Path:
    """A virtual environment made from `executable`, with one server script."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {executable.parent}\nexecutable = {executable}\nversion = 3.11.7\n")
    script = venv / "bin" / "mcp-server-time"
    script.write_text(f"#!{venv}/bin/python\nprint('hi')\n")
    script.chmod(0o755)
    os.symlink(executable, venv / "bin" / "python")
    return script


def test_an_environment_shows_itself_and_its_interpreters_installation_not_a_folder_of_links(tmp_path):
    # The interpreter installed in a folder of its own; a folder of links, beside other files, names it.
    installed = tmp_path / "pythons" / "cpython-3.11"
    (installed / "bin").mkdir(parents=True)
    (installed / "lib" / "python3.11").mkdir(parents=True)
    os.symlink(sys.executable, installed / "bin" / "python3.11")
    links = tmp_path / "dot-local" / "bin"
    links.mkdir(parents=True)
    (links.parent / "share-secret.txt").write_text("not for servers")
    os.symlink(installed / "bin" / "python3.11", links / "python3.11")

    found = installation(str(environment(tmp_path, links / "python3.11")))

    shown = set(found.readable)
    assert str(tmp_path / "venv") in shown
    assert str(links.parent) not in shown and str(tmp_path / "dot-local") not in shown
    # The real interpreter's installation is shown: the links lead there.
    real = Path(sys.executable).resolve()
    assert str(real.parent.parent) in shown or real.is_relative_to("/usr")


def test_an_environment_whose_interpreter_is_gone_says_to_make_it_again(tmp_path):
    script = environment(tmp_path, tmp_path / "gone" / "bin" / "python3.11")
    with pytest.raises(InstallError, match=r"does not exist: make the environment again"):
        installation(str(script))
