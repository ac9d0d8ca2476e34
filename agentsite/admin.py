"""Admin pages that are no app's own."""
from django.contrib import admin
from django_q.models import Schedule

# agentsite's schedules and reminders fire from its own ticker (sessions.timers), and django-q2's
# scheduler is off (Q_CLUSTER["scheduler"]): a schedule made on django-q2's page would never run.
admin.site.unregister(Schedule)
