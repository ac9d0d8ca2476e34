"""What a program installed on the host needs to run in the sandbox: the paths of its installation.

A script in a virtual environment's `bin/` needs the environment (the folder
holding `pyvenv.cfg`) and the interpreter it was made from (`home` in that
file, and that interpreter's prefix). Any other script needs itself and the
interpreter its `#!` line names, with that interpreter's installation. Each
path is bound at its real place (symlinks resolved) and, where the program
names it by another path, there too. A path that is or holds a home
directory, the state root or the workspaces, or lies in the host's own
places (/etc, /proc, ...), is never given: InstallError says which, and
what to do instead.
"""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

SHEBANG_BYTES = 256
# The host's configuration (the server's settings and secrets: /etc/agentsite/agentsite.env, readable by the
# server's user, whom a sandbox keeps when the server is not root), its processes and its devices.
SYSTEM_PLACES = tuple(Path(p) for p in ("/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot"))


class InstallError(Exception):
    """The program is missing, or its installation cannot be shown to a sandboxed process."""


@dataclass
class Installation:
    """Host paths a program needs, as `sandbox.Mounts` takes them."""

    readable: list[str] = field(default_factory=list)  # bound at the same place inside
    aliases: list[tuple[str, str]] = field(default_factory=list)  # (real host path, the path it is named by)

    def add(self, path: Path) -> None:
        """`path` (a folder or a file), at its real place and at the place it is named by."""
        named, real = Path(os.path.abspath(path)), path.resolve()
        if _under_usr(real) and _under_usr(named):
            return  # the sandbox shows /usr already
        if reason := hidden(real):
            raise InstallError(f"{real} {reason}, which no sandboxed process may see: install the program into a "
                               "folder of its own (a virtual environment) outside it, and give that path")
        if str(real) not in self.readable:
            self.readable.append(str(real))
        # A name under /usr is a link there already, which leads to the real place.
        if named != real and not _under_usr(named) and (str(real), str(named)) not in self.aliases:
            self.aliases.append((str(real), str(named)))


def installation(program: str, found: Installation | None = None) -> Installation:
    """The paths `program` (an absolute path; a bare name is found on the sandbox's PATH, under /usr) needs,
    added to `found` when given."""
    found = Installation() if found is None else found
    path = Path(program)
    if path.is_absolute():
        _program(path, found, script=True)
    return found


def _program(path: Path, found: Installation, *, script: bool) -> None:
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InstallError(f"{path} does not exist on this host: install it there, or give its path as "
                           "`which` prints it") from None
    prefix = _environment(path) or _environment(real)
    if prefix is not None:
        found.add(prefix)
        base = _base_interpreter(prefix)
        if base is not None:
            _program(base, found, script=False)
        return
    # A script alone is enough of itself (its folder may be someone's ~/bin); an interpreter needs its prefix.
    prefix = real.parent.parent if real.parent.name == "bin" else real.parent
    if not script and len(prefix.parts) < 3 and not _under_usr(prefix):
        raise InstallError(f"the interpreter {path} is installed straight under {prefix}, which is too much to "
                           "show a sandboxed process: install it into a folder of its own (/opt/NAME)")
    found.add(path if script else prefix)
    interpreter = _shebang(real) if script else None
    if interpreter is not None and interpreter.name != "env":  # `env NAME` finds NAME on the PATH inside
        _program(interpreter, found, script=False)


def _environment(program: Path) -> Path | None:
    """The virtual environment whose `bin/` holds `program`, if any."""
    prefix = program.parent.parent
    return prefix if program.parent.name == "bin" and (prefix / "pyvenv.cfg").is_file() else None


def _base_interpreter(prefix: Path) -> Path | None:
    """The interpreter a virtual environment was made from: `executable` in its pyvenv.cfg, else the
    python in its `home`. Its own installation is what is shown, found from the interpreter's real
    place: `home` may be a folder of links (~/.local/bin), which is not shown whole."""
    values = {}
    for line in (prefix / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    if values.get("executable"):
        interpreter = Path(values["executable"])
    elif values.get("home"):
        interpreter = Path(values["home"]) / "python3"
    else:
        return None
    if not interpreter.is_absolute() or not interpreter.exists():
        raise InstallError(f"{prefix}/pyvenv.cfg names {interpreter} as its interpreter, which does not exist: "
                           "make the environment again (python -m venv --clear)")
    return interpreter


def _shebang(script: Path) -> Path | None:
    try:
        with open(script, "rb") as handle:
            first = handle.read(SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]) if words and words[0].startswith("/") else None


def _under_usr(path: Path) -> bool:
    return path.parts[:2] == ("/", "usr")


def hidden(path: Path) -> str:
    """Why no sandboxed process may see `path` (a real path), or "": it is or holds the state root, the
    workspaces or a home directory, lies inside the state root or the workspaces, or is the host's own
    (SYSTEM_PLACES)."""
    if path == Path("/"):
        return "is the root of the filesystem"
    for place in SYSTEM_PLACES:
        if path == place or place in path.parents:
            return f"is in {place}, the host's own (its settings, secrets, processes or devices)"
    for guarded in _server_places():
        if path == guarded or guarded in path.parents or path in guarded.parents:
            return f"is or holds the server's state root or workspaces ({guarded})"
    for home in _homes():
        if path == home or path in home.parents:  # a folder inside one is fine: a virtual environment
            return f"is or holds the home directory {home}"
    return ""


def _server_places() -> list[Path]:
    """The state root, the workspaces and a SQLite database's folder (which may lie elsewhere)."""
    places = [Path(settings.STATE_ROOT).resolve(), Path(settings.AGENTSITE_WORKSPACES_ROOT).resolve()]
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]) != ":memory:":
        places.append(Path(database["NAME"]).resolve().parent)
    return places


def _homes() -> set[Path]:
    # /home itself always: accounts from LDAP or sssd may not be listed by getpwall.
    homes = {Path(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir.startswith("/")}
    homes |= {Path(os.path.expanduser("~")), Path("/root"), Path("/home")}
    return {home for home in homes if len(home.parts) > 1 and not _under_usr(home)}
