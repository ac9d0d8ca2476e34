"""Debian's nginx with deploy/nginx.conf, run by a test (or a benchmark) in a folder of its own.

The site config is used as written, with its placeholders (host, certificate,
listen ports, the upstream) substituted; `rendered_site` fails when one is
missing, so the test keeps testing the file people copy. Everything nginx
writes (pid, logs, temp files) stays in the folder: no root-owned paths.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.support import ROOT

SITE = ROOT / "deploy" / "nginx.conf"


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if found is None:
        pytest.skip("nginx is not installed (.ci/run installs Debian's)")
    return found


def self_signed_certificate(folder: Path, host: str = "localhost") -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName=DNS:{host},IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def rendered_site(*, https_port: int, http_port: int, upstream_port: int, cert: Path, key: Path,
                  host: str = "localhost") -> str:
    text = SITE.read_text()
    for placeholder, value in (
        ("/etc/ssl/certs/agents.example.com.pem", str(cert)),
        ("/etc/ssl/private/agents.example.com.key", str(key)),
        ("agents.example.com", host),
        ("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};"),
        ("listen 443 ssl;", f"listen 127.0.0.1:{https_port} ssl;"),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
    ):
        assert placeholder in text, f"deploy/nginx.conf no longer has {placeholder!r}"
        text = text.replace(placeholder, value)
    return text


def main_config(folder: Path, site: str) -> str:
    """The nginx.conf around the site: every path nginx writes inside `folder`."""
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""  # root's workers would be nobody
    temps = "\n".join(f"    {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}worker_processes 1;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'} info;\n"
            f"events {{ worker_connections 512; }}\n"
            f"http {{\n    access_log {folder / 'access.log'};\n{temps}\n{site}\n}}\n")


def wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nginx did not listen on {port}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


@contextlib.contextmanager
def run_nginx(folder: Path, *, https_port: int, http_port: int, upstream_port: int) -> Iterator[Path]:
    """nginx in the foreground (`daemon off`) as a child process; yields the CA file to verify with."""
    binary = nginx_binary()
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed_certificate(folder)
    conf = folder / "nginx.conf"
    conf.write_text(main_config(folder, rendered_site(https_port=https_port, http_port=http_port,
                                                      upstream_port=upstream_port, cert=cert, key=key)))
    log = folder / "error.log"
    checked = subprocess.run([binary, "-t", "-p", str(folder), "-e", str(log), "-c", str(conf)],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen([binary, "-p", str(folder), "-e", str(log), "-c", str(conf), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for_port(https_port, process, log)
        yield cert
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
