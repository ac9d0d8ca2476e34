"""`manage.py qcluster`: django-q2's cluster, started once the agents' active releases are loaded.

The cluster forks its sentinel, which forks the turn workers: what is
loaded here first (agents.discovery.warming) is shared by all of them.
Once the sentinel runs, this process has nothing left to do but wait, so it
replaces itself with agents.cluster_waiter, which holds no Django; a stop
signal reaches the sentinel from there as SIGTERM, which the sentinel takes
as django-q2's cluster process would have told it: its stop event.
This app (agents) comes before django_q in INSTALLED_APPS, so this command is the one run.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
from multiprocessing import Event, Value, current_process
from pathlib import Path
from time import sleep

import setproctitle
from django.conf import settings
from django_q.cluster import Cluster, Sentinel, get_mp_context, worker
from django_q.management.commands.qcluster import Command as ClusterCommand
from django_q.tasks import async_task

from agents import taskdoor
from agents.discovery.warming import warm_active_releases
from agents.signalwait import STOP_SIGNALS
from agents.forking import close_database_before_fork

PROJECT = Path(__file__).resolve().parents[3]  # where `-m agents.cluster_waiter` is found


class DoorSentinel(Sentinel):
    """django-q2's sentinel whose workers also take tasks at the task door (agents.taskdoor), when it is open."""

    def spawn_worker(self):
        door = taskdoor.opened()
        if door is None:
            return super().spawn_worker()
        # As Sentinel.spawn_worker, with the two queues seen through the door's wrappers.
        self.spawn_process(worker, taskdoor.DoorQueue(self.task_queue, door), taskdoor.DoorResults(self.result_queue),
                           Value("f", -1), self.timeout)

    def stop(self):
        door = taskdoor.opened()
        if door is not None:
            door.shut()  # knocks from now on go through the broker
        super().stop()
        if door is not None:  # knocked before the shut, and left when the workers went: the broker's now
            func = settings.AGENTSITE_DOOR_TASK
            door.drain(lambda argument: async_task(func, argument, task_name=argument, broker=self.broker,
                                                   ack_failure=True))


def run_sentinel(stop_event, start_event, cluster_id, broker, timeout) -> None:
    """The sentinel's process: django-q2's Sentinel, which also stops on a SIGTERM (sent by the waiter)."""
    sentinel = DoorSentinel(stop_event, start_event, cluster_id, broker, timeout, start=False)

    def stop(signum, frame):
        # From a thread: the guard loop may hold the event's lock at this very moment.
        threading.Thread(target=stop_event.set, name="stop", daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    # What it forks keeps the sentinel's own settings (django-q2's): ended by SIGTERM, deaf to SIGINT.
    os.register_at_fork(after_in_child=_sentinels_children_signals)
    sentinel.start()


def _sentinels_children_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class WaitedCluster(Cluster):
    """django-q2's cluster whose sentinel is `run_sentinel`."""

    def start(self) -> int:
        setproctitle.setproctitle(f"qcluster {current_process().name} {self.name}")
        self.stop_event, self.start_event = Event(), Event()
        self.sentinel = get_mp_context().Process(
            target=run_sentinel, name=f"Process-{uuid.uuid4().hex}",
            args=(self.stop_event, self.start_event, self.cluster_id, self.broker, self.timeout))
        self.sentinel.start()
        # Polled, not waited on: a stop signal meanwhile runs Cluster.sig_handler, which clears start_event.
        while self.start_event is not None and not self.start_event.is_set():
            if not self.sentinel.is_alive():
                raise RuntimeError(f"the cluster's sentinel exited with {self.sentinel.exitcode} as it started")
            sleep(0.1)
        return self.pid


class Command(ClusterCommand):
    help = "Start the turn workers (a django-q2 cluster), with the agents' active releases loaded first."

    def handle(self, *args, **options):
        warm_active_releases()
        close_database_before_fork()  # the cluster forks next
        if options.get("run_once") or options.get("cluster_name"):
            return super().handle(*args, **options)  # django-q2's own ways, kept as they are
        settings.SECRET_KEY  # the tasks are signed with it: fail here, not in the workers
        taskdoor.open_door()  # before the fork: every worker holds it
        cluster = WaitedCluster()
        cluster.start()
        # A stop signal from here on waits for the waiter, which takes it (blocked signals stay pending).
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        if cluster.start_event is None:  # stopped already, by a signal that came while it started
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(PROJECT)
        os.execv(sys.executable, [sys.executable, "-m", "agents.cluster_waiter", str(cluster.sentinel.pid),
                                  setproctitle.getproctitle(), cluster.name])
