"""Settings for agentsite, read from the environment.

The embedded default needs nothing set: SQLite (WAL) under the state root,
the in-memory channel layer, django-q2's ORM broker and the scripted model.
`DATABASE_URL` and `REDIS_URL` switch to PostgreSQL and Redis for scale-out.
"""
from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from agentsite.backups.cadence import parse_keep, parse_schedule
from agentsite.databases import database_config
from agentsite.limits import (
    DEFAULT_AGENT_HOP_LIMIT, DEFAULT_AGENT_MESSAGE_RATE, DEFAULT_AGENT_TURN_BUDGET, DEFAULT_AUTH_FAILURES_PER_ACCOUNT,
    DEFAULT_AUTH_FAILURES_PER_ADDRESS, DEFAULT_MAX_RUNNING_TURNS, DEFAULT_RATE_MESSAGES, DEFAULT_RATE_SESSIONS,
    parse_cap, parse_count, parse_dollars, parse_per_minute, parse_rate,
)
from agentsite.logs import logging_settings
from agentsite.production import FALLBACK_SECRET_KEY, environment, production_settings

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


# The longest retention the setting (and an agent, agents/discovery/folder.py) may ask for.
_MAX_RETENTION_DAYS = 36500


def _env_retention_days(name: str) -> int | None:
    """Days to keep sessions, from `name`: unset, empty or 0 is off (None); anything else but a whole
    number of days between 1 and _MAX_RETENTION_DAYS stops the server from starting."""
    from django.core.exceptions import ImproperlyConfigured

    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) > _MAX_RETENTION_DAYS:
        raise ImproperlyConfigured(f"{name}={value!r}: give a whole number of days (such as 90), at most "
                                   f"{_MAX_RETENTION_DAYS}, or leave it unset to keep sessions forever")
    return int(value) or None


STATE_ROOT = Path(os.environ.get("AGENTSITE_STATE_ROOT", BASE_DIR / ".agentsite")).resolve()
STATE_ROOT.mkdir(parents=True, exist_ok=True)

# Prometheus metrics (sessions.metrics.families) are summed over every process of the server by
# prometheus_client's multiprocess mode: each process writes its own files here. The library
# picks how it stores values when it is first imported, so this is set before anything can
# import it, in every process that loads these settings (web, qcluster and its forks), and
# always to this state root's folder, never to one inherited from another server's process.
METRICS_DIR = STATE_ROOT / "metrics"
METRICS_DIR.mkdir(exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(METRICS_DIR)

SECRET_KEY = os.environ.get("AGENTSITE_SECRET_KEY") or FALLBACK_SECRET_KEY
DEBUG = _env_bool("AGENTSITE_DEBUG")
ALLOWED_HOSTS = [h for h in os.environ.get("AGENTSITE_ALLOWED_HOSTS", "*").split(",") if h]
# Proxies in front of this server (addresses and CIDR networks), comma-separated: only their
# forwarding headers name the client, scheme and host (channels_app.proxies).
AGENTSITE_TRUSTED_PROXIES = [p.strip() for p in os.environ.get("AGENTSITE_TRUSTED_PROXIES", "").split(",") if p.strip()]
# "production": refuse to start without a real secret key and the public URL, debug off, only the
# public URL's host allowed, secure cookies and HSTS over https (agentsite/production.py).
AGENTSITE_ENV = environment(os.environ)
if AGENTSITE_ENV == "production":
    globals().update(production_settings(os.environ))

# daphne serves the web processes from its own command line (serve); as an app it would only
# replace runserver, and it would import twisted into every process, workers and commands too.
INSTALLED_APPS = [
    "agentsite.apps.OperatorsAdminConfig",  # django.contrib.admin, open to the operators group
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "agents",  # before django_q: its qcluster command (the releases loaded before the workers fork) is run
    "django_q",
    "agentsite",
    "sessions.apps.SessionsConfig",
    "channels_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's and the playground's static files from the apps, under daphne too.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The session a request is about, on its log lines (AGENTSITE_LOG_FORMAT=json).
    "channels_app.request_log.name_the_session",
    # Under AGENTSITE_LOG_FORMAT=json: the route and principal of a request, for its access line.
    "channels_app.access_log.note_the_request",
    # A traced request's span named by its route, its trace id on its log lines (when OTEL_* turns tracing on).
    "channels_app.request_spans.name_the_span",
    # agentsite_http_requests_total, by the URL pattern each request matched (GET /metrics).
    "channels_app.metrics.count_requests",
    # Before anything acts on a request: writes from another site's pages stop here.
    "channels_app.origin.cross_site_guard",
    # A NUL in a path id or query parameter is a 400 before any view looks it up.
    "channels_app.middleware.refuse_unstorable_urls",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentsite.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "channels_app.playground.dev_mode",
            ],
        },
    },
]

WSGI_APPLICATION = "agentsite.wsgi.application"
ASGI_APPLICATION = "agentsite.asgi.application"


DATABASES = {"default": database_config(os.environ.get("DATABASE_URL"), STATE_ROOT)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, the length of
            # channels_redis's blocking pop: an idle receive (a websocket with no
            # events for 5 s) would raise TimeoutError and kill its consumer.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}], "capacity": 1000, "expiry": 30},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# What web processes must agree on (Slack's replayed signatures, agents.integrations.slack):
# Redis when there is one, so every web process sees it; the embedded default runs one
# web process, whose own memory is enough.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": "agentsite"}}
    CACHES["limits"] = CACHES["default"]
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    # The rate counters (channels_app/ratelimits.py) must hold across web processes, so
    # without Redis they live in the database every process of the server opens (its
    # table made by `serve` and by the test database's setup: `createcachetable`).
    # Culling drops counters still in use: keep far more than the open windows.
    CACHES["limits"] = {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "agentsite_limits",
                        "OPTIONS": {"MAX_ENTRIES": 100_000}}

Q_CLUSTER = {
    "name": "agentsite",
    "workers": int(os.environ.get("AGENTSITE_WORKERS", "2")),
    # A turn may run long; django-q2 re-hands a task after `retry` seconds,
    # so keep retry above timeout. Turns are claimed in our own table anyway.
    "timeout": int(os.environ.get("AGENTSITE_TURN_TIMEOUT", "3600")),
    "retry": int(os.environ.get("AGENTSITE_TURN_TIMEOUT", "3600")) + 600,
    "max_attempts": 1,
    # Tasks a worker runs before django-q2 replaces it with a fresh fork.
    "recycle": int(os.environ.get("AGENTSITE_Q_RECYCLE", "500")),
    "ack_failures": True,
    "save_limit": -1,
    "catch_up": False,
    # Schedules and reminders fire from our own ticker (sessions/timers); django-q2's
    # scheduler would only query its empty Schedule table every 30 s in every cluster.
    "scheduler": False,
    "label": "Tasks",
}
# The one task the cluster's workers also take by datagram, past the broker (agents.taskdoor): running a
# turn, whose row is its own queue entry. AGENTSITE_TASK_DOOR=0 sends every task through the broker.
AGENTSITE_DOOR_TASK = "sessions.turn.engine.run_turn"
AGENTSITE_TASK_DOOR = os.environ.get("AGENTSITE_TASK_DOOR", "1") != "0"
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
    # Enqueueing rings the pusher's doorbell, so dispatch is immediate and the
    # poll is only the fallback when a ring is lost.
    Q_CLUSTER["broker_class"] = "sessions.plumbing.broker.DoorbellORM"
    Q_CLUSTER["poll"] = float(os.environ.get("AGENTSITE_Q_POLL", "0.5"))

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Every page is in English (no LocaleMiddleware chooses another language), so translation is off: with
# it on, each string marked for translation is looked up in the catalogs when used, and django-q2
# formats such a string for every task its pusher, worker and monitor handle (3.5% of the turn
# workers' CPU per simple turn). Dates and numbers are still formatted as en-us.
USE_I18N = False
USE_TZ = True

# People log in under /accounts/ (channels_app/accounts.py), then land on the playground.
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/playground/"

# Django's four: a password like the username, shorter than 8 characters, one of the
# commonly used ones, or all digits is refused where a person sets one (password
# change, the admin, `createsuperuser`, `changepassword`) with a message saying why.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

STATIC_URL = "static/"
STATIC_ROOT = STATE_ROOT / "static"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # no collectstatic step on the embedded default
WHITENOISE_AUTOREFRESH = DEBUG

# Agent bodies are small JSON; anything bigger is refused with a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("AGENTSITE_MAX_BODY_BYTES", str(1024 * 1024)))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["channels_app.auth.PolicyChainAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["channels_app.doors.HasPrincipal"],
    "DEFAULT_RENDERER_CLASSES": ["channels_app.replies.base.JSONRenderer"],
    # Bounded nesting, finite numbers, text both databases store: 400s with their own codes.
    "DEFAULT_PARSER_CLASSES": ["channels_app.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "channels_app.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentsite API",
    "DESCRIPTION": "Sessions, turns and event streams of the agents served by agentsite.",
    "VERSION": "0.1.0",
    # 3.1: request bodies are pydantic models, whose optional fields are `null` unions.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The viewer's assets ship in a package: /api/docs/ works with no network.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # These hooks make the document of the code, once per process; channels_app.schema.Generator
    # adds what depends on the caller and the deployed agents (document_security) per request.
    "DEFAULT_GENERATOR_CLASS": "channels_app.schema.Generator",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "channels_app.schema.add_streaming_routes",
    ],
}

# AGENTSITE_LOG_FORMAT ("text" or "json") and AGENTSITE_LOG_LEVEL: agentsite.logs.
LOG_FORMAT, LOGGING = logging_settings(os.environ)
LOGGING_CONFIG = "sessions.plumbing.logcontext.configure"  # under json, Python's warnings as JSON lines too
# OpenTelemetry is configured from the standard OTEL_* variables (sessions.tracing.setup). Where
# operators look a trace up: a URL with `{traceId}` in it (a Jaeger or Tempo page), linked from
# the playground's trace page and the admin dashboard; empty: trace ids are shown, not linked.
AGENTSITE_TRACE_URL = os.environ.get("AGENTSITE_TRACE_URL", "")

# --- agentsite's own switches (read at call time through django.conf.settings) ---
# The auth-policy chain: "local_dev_strict" (default), "bearer", "allow_all".
AGENTSITE_AUTH = os.environ.get("AGENTSITE_AUTH", "local_dev_strict")
# sha256 hex digests of accepted bearer tokens (serve --bearer-token stores only these).
AGENTSITE_BEARER_TOKEN_HASHES = [h for h in os.environ.get("AGENTSITE_BEARER_TOKEN_HASHES", "").split(",") if h]
# GET /metrics with `Authorization: Bearer <AGENTSITE_METRICS_TOKEN>` (a scraper's own secret, no user):
# only its sha256 digest is kept, compared in constant time (channels_app.metrics).
AGENTSITE_METRICS_TOKEN_HASH = (hashlib.sha256(os.environ["AGENTSITE_METRICS_TOKEN"].strip().encode()).hexdigest()
                                if os.environ.get("AGENTSITE_METRICS_TOKEN", "").strip() else "")
AGENTSITE_DEV = _env_bool("AGENTSITE_DEV")
# serve --dev / --reload: the served agent folders are deployed again when they change (agents.discovery.watching).
AGENTSITE_RELOAD = _env_bool("AGENTSITE_RELOAD")
# Fernet keys for agents' secrets, comma-separated: the first encrypts, all decrypt (agents.secrets.keys).
# Required in production; in development an empty value means a key made in the state root.
AGENTSITE_SECRETS_KEYS = os.environ.get("AGENTSITE_SECRETS_KEYS", "")
# "on": every process an agent starts runs in the bubblewrap sandbox, and a host that cannot build it
# offers no shell. "off": commands run as the server's own user (a single-user machine only).
AGENTSITE_SANDBOX = os.environ.get("AGENTSITE_SANDBOX", "on")
# "auto": as root, on a local disk, each sandboxed workspace is a loop-mounted filesystem image of its disk
# limit (agents.workspaces.disks), so the kernel refuses writes past it. "off": plain directories, size watched.
AGENTSITE_WORKSPACE_DISKS = os.environ.get("AGENTSITE_WORKSPACE_DISKS", "auto")
# serve --no-schedules turns cron schedules off (reminders still fire).
AGENTSITE_SCHEDULES = _env_bool("AGENTSITE_SCHEDULES", True)
AGENTSITE_PUBLIC_URL = os.environ.get("AGENTSITE_PUBLIC_URL", "")
# Origins besides the server's own whose pages may post here, from
# AGENTSITE_TRUSTED_ORIGINS (comma-separated, e.g. "https://agents.example.com,
# https://*.example.org") and AGENTSITE_PUBLIC_URL: the cross-site guard and
# Django's CSRF check of admin logins trust the same list (channels_app/origin.py).
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("AGENTSITE_TRUSTED_ORIGINS", "").split(",") if o.strip()]
if AGENTSITE_PUBLIC_URL:
    _public = urlsplit(AGENTSITE_PUBLIC_URL)
    CSRF_TRUSTED_ORIGINS.append(f"{_public.scheme}://{_public.netloc}")
# Agents that name no model get this; empty: a provider with a key in the env, else scripted:echo.
AGENTSITE_DEFAULT_MODEL = os.environ.get("AGENTSITE_DEFAULT_MODEL", "")
# A running turn renews its lease every third of this; a lapsed lease means its worker died.
AGENTSITE_TURN_LEASE_SECONDS = float(os.environ.get("AGENTSITE_TURN_LEASE_SECONDS", "30"))
# This host's name in the ids of the processes holding turns, calls and handlers (`host:pid`): unique per host
# when several hosts share the database.
AGENTSITE_HOST_ID = os.environ.get("AGENTSITE_HOST_ID") or socket.gethostname()
if len(AGENTSITE_HOST_ID) > 80:  # it goes in `host:pid` columns of 100 characters
    raise ImproperlyConfigured(f"AGENTSITE_HOST_ID is at most 80 characters: {AGENTSITE_HOST_ID!r}")
# Every long-running process renews its host's lease every third of this; a host whose lease lapsed is lost,
# and the turns its processes ran fail as worker_lost at the next sweep of any other host.
AGENTSITE_HOST_LEASE_SECONDS = float(os.environ.get("AGENTSITE_HOST_LEASE_SECONDS", "15"))
# How often the qcluster process looks for turns of dead workers.
AGENTSITE_SWEEP_SECONDS = float(os.environ.get("AGENTSITE_SWEEP_SECONDS", "1"))
# A turn still queued this long may have lost its task (a queue that restarted): the sweep enqueues it again,
# at most once per this interval. Shorter recovers sooner; longer adds fewer duplicate tasks under a deep backlog.
AGENTSITE_REQUEUE_SECONDS = float(os.environ.get("AGENTSITE_REQUEUE_SECONDS", "30"))
# A release's files are stored in the database when it is deployed (so any host can run it): a deploy whose
# agent/ folder is larger than this once packed (tar.gz) is refused.
AGENTSITE_RELEASE_MAX_BYTES = int(os.environ.get("AGENTSITE_RELEASE_MAX_BYTES", str(20 * 1024 * 1024)))
# Threads that run the web process's synchronous code (views, database calls), shared by all
# requests (agentsite/threads.py); each keeps its database connection between requests.
AGENTSITE_WEB_THREADS = int(os.environ.get("AGENTSITE_WEB_THREADS", "8"))
# Run each turn in the process that starts it instead of handing it to a qcluster worker:
# `manage.py run` and processes with no cluster beside them turn it on (sessions/turn/admission.py).
AGENTSITE_INLINE_TURNS = False
AGENTSITE_MAX_STEPS = int(os.environ.get("AGENTSITE_MAX_STEPS", "12"))
# Local runtimes: one directory per session under this folder (deleted with the session).
AGENTSITE_WORKSPACES_ROOT = Path(os.environ.get("AGENTSITE_WORKSPACES_ROOT", STATE_ROOT / "workspaces")).resolve()
# Files sent with a message (workspaceFiles): at most this many, each at most this many bytes.
AGENTSITE_WORKSPACE_FILES_MAX = int(os.environ.get("AGENTSITE_WORKSPACE_FILES_MAX", "50"))
AGENTSITE_WORKSPACE_FILE_MAX_BYTES = int(os.environ.get("AGENTSITE_WORKSPACE_FILE_MAX_BYTES", str(256 * 1024)))
# How long a channel remembers the webhook deliveries it acted on (GitHub and Slack redeliver for hours, not days).
AGENTSITE_CHANNEL_DELIVERY_DAYS = int(os.environ.get("AGENTSITE_CHANNEL_DELIVERY_DAYS", "14"))
# How often the recovery sweep looks for channel deliveries that were never enqueued (a process
# that died between a commit and its enqueue), and prunes old delivery ids: a scan, so seldom.
AGENTSITE_CHANNEL_RESCAN_SECONDS = float(os.environ.get("AGENTSITE_CHANNEL_RESCAN_SECONDS", "300"))
# The lease on a channel's connection to its provider (Slack's Socket Mode), renewed every third of
# it: when its holder dies, another process takes the connection over within this many seconds.
AGENTSITE_CHANNEL_LEASE_SECONDS = max(3.0, float(os.environ.get("AGENTSITE_CHANNEL_LEASE_SECONDS", "10")))
# claude-agent sessions: how long a worker keeps a session's runtime child for its next turn (0: never), and
# how many it keeps at most (each is a process of some 100-200 MB).
AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS = float(os.environ.get("AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS", "180"))
AGENTSITE_CLAUDE_AGENT_KEPT = int(os.environ.get("AGENTSITE_CLAUDE_AGENT_KEPT", "4"))
# The web_search built-in's backend (sessions.harness.search): searxng:<base URL>, or brave (its key in
# BRAVE_SEARCH_API_KEY); unset: agents that declare web_search are not offered it, and /info says why.
AGENTSITE_SEARCH_BACKEND = os.environ.get("AGENTSITE_SEARCH_BACKEND", "")
# Sessions idle for longer than this many days are deleted by the ticker (sessions/retention/sweep.py);
# None (unset) keeps them. An agent overrides it with Agent(retention_days=N).
AGENTSITE_RETENTION_DAYS = _env_retention_days("AGENTSITE_RETENTION_DAYS")
# Scheduled backups (agentsite/backups/scheduled.py): a UTC cron expression (empty or `off`: none), how many
# of their archives to keep, and where they are written (agentsite-scheduled-<slot>.tar.gz).
AGENTSITE_BACKUP_SCHEDULE = parse_schedule("AGENTSITE_BACKUP_SCHEDULE", os.environ.get("AGENTSITE_BACKUP_SCHEDULE"))
AGENTSITE_BACKUP_KEEP = parse_keep("AGENTSITE_BACKUP_KEEP", os.environ.get("AGENTSITE_BACKUP_KEEP"))
AGENTSITE_BACKUP_DIR = Path(os.environ.get("AGENTSITE_BACKUP_DIR", STATE_ROOT / "backups")).resolve()
# Per-principal limits (agentsite/limits.py): sessions started and messages sent, as
# `N/sec|min|hour` or `off` (over it: 429 with Retry-After), and turns running at once
# (more wait queued, in order; `0` or `off`: no cap).
AGENTSITE_RATE_SESSIONS = parse_rate("AGENTSITE_RATE_SESSIONS", os.environ.get("AGENTSITE_RATE_SESSIONS"),
                                     DEFAULT_RATE_SESSIONS)
AGENTSITE_RATE_MESSAGES = parse_rate("AGENTSITE_RATE_MESSAGES", os.environ.get("AGENTSITE_RATE_MESSAGES"),
                                     DEFAULT_RATE_MESSAGES)
AGENTSITE_MAX_RUNNING_TURNS = parse_cap("AGENTSITE_MAX_RUNNING_TURNS", os.environ.get("AGENTSITE_MAX_RUNNING_TURNS"),
                                        DEFAULT_MAX_RUNNING_TURNS)
# What each person may spend on models in a UTC day and month, in US dollars (sessions.spend);
# unset: no budget. An operator sets one person's own in the admin; an agent has Agent(budget=...).
AGENTSITE_BUDGET_PRINCIPAL_DAILY = parse_dollars("AGENTSITE_BUDGET_PRINCIPAL_DAILY",
                                                 os.environ.get("AGENTSITE_BUDGET_PRINCIPAL_DAILY"))
AGENTSITE_BUDGET_PRINCIPAL_MONTHLY = parse_dollars("AGENTSITE_BUDGET_PRINCIPAL_MONTHLY",
                                                   os.environ.get("AGENTSITE_BUDGET_PRINCIPAL_MONTHLY"))
# Failed logins and refused bearer tokens (channels_app.lockout), as rates: per client address and
# account, and per address whatever the account; over either, attempts get 429 until its window ends.
AGENTSITE_AUTH_FAILURES_PER_ACCOUNT = parse_rate("AGENTSITE_AUTH_FAILURES_PER_ACCOUNT",
                                                 os.environ.get("AGENTSITE_AUTH_FAILURES_PER_ACCOUNT"),
                                                 DEFAULT_AUTH_FAILURES_PER_ACCOUNT)
AGENTSITE_AUTH_FAILURES_PER_ADDRESS = parse_rate("AGENTSITE_AUTH_FAILURES_PER_ADDRESS",
                                                 os.environ.get("AGENTSITE_AUTH_FAILURES_PER_ADDRESS"),
                                                 DEFAULT_AUTH_FAILURES_PER_ADDRESS)
# Agents messaging each other (sessions.messaging): how many messages may pass between agents in a
# row before one is refused, how many turns they may start in all from one person's (or trigger's)
# message, and how many messages one conversation (a pair of sessions) may carry per window.
AGENTSITE_AGENT_HOP_LIMIT = parse_count("AGENTSITE_AGENT_HOP_LIMIT", os.environ.get("AGENTSITE_AGENT_HOP_LIMIT"),
                                        DEFAULT_AGENT_HOP_LIMIT)
AGENTSITE_AGENT_TURN_BUDGET = parse_count("AGENTSITE_AGENT_TURN_BUDGET", os.environ.get("AGENTSITE_AGENT_TURN_BUDGET"),
                                          DEFAULT_AGENT_TURN_BUDGET)
AGENTSITE_AGENT_MESSAGE_RATE = parse_per_minute("AGENTSITE_AGENT_MESSAGE_RATE",
                                                os.environ.get("AGENTSITE_AGENT_MESSAGE_RATE"), DEFAULT_AGENT_MESSAGE_RATE)
AGENTSITE_MAX_MESSAGE_CHARS = int(os.environ.get("AGENTSITE_MAX_MESSAGE_CHARS", "100000"))
# Followers of a session share one read of the event table per wake-up (sessions.eventlog.feeds). In case
# a wake-up was lost, a process-wide safety net looks at every followed session's row every
# AGENTSITE_STREAM_POLL_IDLE seconds; where the transport can drop wake-ups (the channel layer:
# the embedded default's doorbells are datagrams that a socket buffer full for too long drops), each running
# session's feed also polls every AGENTSITE_STREAM_POLL_RUNNING seconds. PostgreSQL's NOTIFY
# loses none while its listener is connected and wakes every reader when it reconnects.
AGENTSITE_STREAM_POLL_RUNNING = float(os.environ.get("AGENTSITE_STREAM_POLL_RUNNING", "0.25"))
AGENTSITE_STREAM_POLL_IDLE = float(os.environ.get("AGENTSITE_STREAM_POLL_IDLE", "5"))
# Text deltas are coalesced for this long before they are written.
AGENTSITE_DELTA_FLUSH_SECONDS = float(os.environ.get("AGENTSITE_DELTA_FLUSH_SECONDS", "0.1"))
# Limits of the host services agent code reaches on `ctx.host` (sessions/host/): a key-value
# value as JSON, one stored file, one artifact, and the artifacts one session keeps.
AGENTSITE_KV_MAX_VALUE_BYTES = int(os.environ.get("AGENTSITE_KV_MAX_VALUE_BYTES", str(64 * 1024)))
AGENTSITE_HOST_FILE_MAX_BYTES = int(os.environ.get("AGENTSITE_HOST_FILE_MAX_BYTES", str(10 * 1024 * 1024)))
AGENTSITE_ARTIFACT_MAX_BYTES = int(os.environ.get("AGENTSITE_ARTIFACT_MAX_BYTES", str(10 * 1024 * 1024)))
AGENTSITE_ARTIFACTS_PER_SESSION = int(os.environ.get("AGENTSITE_ARTIFACTS_PER_SESSION", "200"))
