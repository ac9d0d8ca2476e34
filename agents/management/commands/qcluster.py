"""`manage.py qcluster`: django-q2's cluster, started once the agents' active releases are loaded.

The cluster forks its sentinel, which forks the turn workers: what is
loaded here first (agents.discovery.warming) is shared by all of them.
This app (agents) comes before django_q in INSTALLED_APPS, so this command is the one run.
"""
from __future__ import annotations

from django_q.management.commands.qcluster import Command as ClusterCommand

from agents.discovery.warming import warm_active_releases
from agents.forking import close_database_before_fork


class Command(ClusterCommand):
    help = "Start the turn workers (a django-q2 cluster), with the agents' active releases loaded first."

    def handle(self, *args, **options):
        warm_active_releases()
        close_database_before_fork()  # the cluster forks next
        return super().handle(*args, **options)
