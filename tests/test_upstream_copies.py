"""Code copied from a dependency stays in step with the version it was copied from.

Each check hashes the source of the upstream code a copy replaces or relies
on. When one fails, the dependency changed it: read the new upstream source,
carry what changed into the copy named in the message (or drop the copy if
upstream now does what it needed), then record the new hash here.
"""
from __future__ import annotations

import hashlib
import inspect

from django.db.backends.postgresql import base
from django_q.brokers.orm import ORM
from django_q.cluster import Cluster, Sentinel
from django_q.worker import worker


def _digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def test_djangos_pool_property_is_the_one_agentsite_postgresql_copies():
    assert _digest(base.DatabaseWrapper.pool.fget) == \
        "e5c2654fdf2d50900fec9db41948d0b026da988e24d0eba1b4b9a9d4aacb1b17", (
            "Django's postgresql DatabaseWrapper.pool changed: agentsite/postgresql/base.py copies it (Django 5.2) "
            "with its own connection check; re-check the pool's options, its opening and its check against it")


UPSTREAM_BROKER = {
    # Replaced by sessions.plumbing.broker.DoorbellORM (its statements in sessions.sql.queue).
    "enqueue": "fed90e1fc44623221aa2fc010971aa1837b6574defcab15c8481e73a9196c6d0",
    "dequeue": "c4e346b7cb21e6fff155cf553e12bd72fcb56064c468dc956590269796d93b01",
    "delete": "867185f49ad65c96d80dd03bcce4b36a047a26dbe53609d42f310648eab85a35",
    # Repeated by sessions.plumbing.broker._connection (drop stale connections outside a transaction).
    "get_connection": "c9080441f31faf9bdb2f1486af2d5fab3b04c1076a942e61135e005ae4ce394a",
    # Kept from upstream: they must still go through `delete`.
    "acknowledge": "07326e1f1e551db995c7e02ba9b8f4ac667d8017b9b39f69d0f0fce3750fd697",
    "fail": "eeecccd46a3f63a2de32bb8dcac172a0daf6957c736e018970a3d078f78183d8",
}


def test_django_q2s_orm_broker_is_the_one_sessions_broker_forks():
    changed = [name for name, digest in UPSTREAM_BROKER.items() if _digest(getattr(ORM, name)) != digest]
    assert changed == [], (
        f"django-q2's ORM broker changed {changed}: sessions/plumbing/broker.py (DoorbellORM) and sessions/sql/queue.py "
        "fork its enqueue, dequeue and delete; re-check the rows, the lock conditions and the claim against it")


UPSTREAM_CLUSTER = {
    # Replaced by agents.management.commands.qcluster.WaitedCluster.start (its sentinel is run_sentinel).
    "Cluster.start": "70fbc24e3cd71bbd034f75e3207a701387b538ad2adca2ab79d76ac6108ceeb6",
    # What the waiter's SIGTERM stands in for: the cluster's stop sets the sentinel's stop event.
    "Cluster.stop": "0230e6a459b68502cdb428f015df781f90072e413f726173a718ac3edb899a32",
    # run_sentinel builds it with start=False and relies on the signals it sets (SIGINT ignored, SIGTERM default).
    "Sentinel.__init__": "6ddfa0bde90a4a736269e83ebca477160d284342897f25f6c85e9189746a77d4",
    # Replaced by DoorSentinel.spawn_worker, which passes the two queues through agents.taskdoor's wrappers.
    "Sentinel.spawn_worker": "3c4764964efe10c10ee7a5a345e0af0111fe159a7c524f8b7af5c2ea1bba6f2a",
    # DoorSentinel.stop hands what is left at the door to the broker after it: all workers must be gone then.
    "Sentinel.stop": "d858ef90cdaaebf5e2647f543e92eaea29c160007006803e10b42409f6438039",
    # It must still count a process started with django-q2's `worker` as a worker (its pool, its timer).
    "Sentinel.spawn_process": "0f72360b891e9e957217686923ded132956422fbadcb56ed0e061a5ef3807b51",
    # The worker must still read tasks only with `task_queue.get()` and send results only with `put`.
    "worker": "b30d59f639b088ea1c11af538ad57b03977a19f22b874d3319d63b24e2fb72c4",
}


def test_django_q2s_cluster_start_and_sentinel_are_the_ones_the_qcluster_command_relies_on():
    functions = {"Cluster.start": Cluster.start, "Cluster.stop": Cluster.stop, "Sentinel.__init__": Sentinel.__init__,
                 "Sentinel.spawn_worker": Sentinel.spawn_worker, "Sentinel.spawn_process": Sentinel.spawn_process,
                 "Sentinel.stop": Sentinel.stop,
                 "worker": worker}
    changed = [name for name, digest in UPSTREAM_CLUSTER.items() if _digest(functions[name]) != digest]
    assert changed == [], (
        f"django-q2's cluster changed {changed}: agents/management/commands/qcluster.py starts the sentinel "
        "itself (WaitedCluster.start, run_sentinel), its workers read the task door too (DoorSentinel, "
        "agents/taskdoor.py) and agents/cluster_waiter.py stops it with SIGTERM; re-check them against it")
