"""Counts the database statements and commits of a server process, for bench/turns.py.

turns.py puts this directory on the server processes' PYTHONPATH and sets
AGENTSITE_BENCH_COUNT_DIR; Python imports this module at start-up. Every
database connection Django opens then counts its statements and its
commits, and a thread writes the process's
totals to <dir>/<pid>.json twice a second. A commit here is one that can
write: an atomic block's, or a statement other than SELECT run outside one. The app's code is not touched.
"""
import json
import os
import threading
import time

_dir = os.environ.get("AGENTSITE_BENCH_COUNT_DIR")
# With AGENTSITE_BENCH_SQL_TRACE=1 every statement is also appended to
# <dir>/<pid>.sql (its first 300 characters), to see what a turn runs.
_trace = os.environ.get("AGENTSITE_BENCH_SQL_TRACE") == "1"


def _install() -> None:
    from django.db.backends.signals import connection_created

    counts = {"queries": 0, "commits": 0}
    lock = threading.Lock()
    state = {"pid": None}

    def count(execute, sql, params, many, context):
        in_atomic = context["connection"].in_atomic_block
        with lock:
            counts["queries"] += 1
            if not in_atomic and not sql.lstrip()[:6].upper() == "SELECT":
                counts["commits"] += 1  # a write that autocommit commits by itself
            if _trace:
                with open(os.path.join(_dir, f"{os.getpid()}.sql"), "a") as f:
                    f.write(f"{'T' if in_atomic else '-'} {' '.join(sql.split())[:300]}\n")
        return execute(sql, params, many, context)

    def on_connection(sender, connection, **kwargs):
        if count not in connection.execute_wrappers:
            connection.execute_wrappers.append(count)
            commit = connection.commit

            def counted_commit():
                with lock:
                    counts["commits"] += 1
                    if _trace:
                        with open(os.path.join(_dir, f"{os.getpid()}.sql"), "a") as f:
                            f.write("- COMMIT\n")
                return commit()

            connection.commit = counted_commit
        _ensure_writer()

    def _ensure_writer():
        # Once per process, forks included (a thread does not survive fork()).
        if state["pid"] == os.getpid():
            return
        state["pid"] = os.getpid()
        with lock:
            counts["queries"] = counts["commits"] = 0  # a forked child starts from its own zero
        threading.Thread(target=_write, daemon=True, name="bench-counts").start()

    def _write():
        pid = os.getpid()
        path = os.path.join(_dir, f"{pid}.json")
        while True:
            with lock:
                snapshot = dict(counts)
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                json.dump(snapshot, f)
            os.replace(tmp, path)
            time.sleep(0.5)

    connection_created.connect(on_connection, weak=False)


if _dir:
    _install()
