"""specdash settings: every knob is an environment variable with a safe default (see docs/team.md, "Configuration")."""

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

from dashboard.demo import suggestions

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SPECDASH_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _secret_key_file() -> str:
    # `make demo` writes the key here (mode 0600), so `manage.py createsuperuser` and friends work in that
    # checkout without exporting it. Settings only read it: a key is never made up here.
    path = VAR_DIR / "secret_key"
    return path.read_text().strip() if path.is_file() else ""


# Production mode: HTTPS only (secure cookies, HSTS, redirect), collected static files, and system checks that
# refuse a debug or keyless instance. See "Deploying for a team" in docs/team.md.
PRODUCTION = _env_bool("SPECDASH_PRODUCTION", False)
DEBUG = _env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "") or _secret_key_file()
if not SECRET_KEY and DEBUG and not PRODUCTION:
    # Only a debug (demo/dev) instance may run with a throwaway key; the system check refuses otherwise.
    SECRET_KEY = "insecure-dev-only-key-do-not-use-in-production"
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
# Also the origins, besides the site's own, that may open its websockets (dashboard/origin.py).
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    # Before django.contrib.auth: its `createsuperuser` (which also checks a non-interactive password) is the one run.
    "dashboard",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # Its templates and static files: the API docs load Swagger UI from this server, not from a CDN.
    "ninja",
    "axes",
    "experiments",
    "workers",
    "dashboard.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "dashboard.api_errors.JsonApiErrorsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
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
                "experiments.context_processors.review_queue",
            ],
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "dashboard.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'specdash.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
        # A kept connection that a database restart broke is replaced before a request or task uses it.
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo's web server and worker write concurrently: WAL lets readers run beside the writer, and
    # IMMEDIATE transactions take the write lock up front (waiting up to `timeout`) instead of failing when a
    # read transaction later needs to write.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# Two deployments (or two checkouts) sharing one Redis must not take each other's tasks or see each other's
# broadcasts: by default the Celery queue and the channel prefix are named after the database served.
_DATABASE_IDENTITY = [DATABASES["default"].get(key) for key in ("ENGINE", "NAME", "HOST", "PORT")]
SPECDASH_INSTANCE = (
    os.environ.get("SPECDASH_INSTANCE")
    or hashlib.sha256(json.dumps(_DATABASE_IDENTITY, default=str).encode()).hexdigest()[:10]
)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": os.environ.get("SPECDASH_CHANNEL_PREFIX", f"specdash-{SPECDASH_INSTANCE}"),
            # A log flood sends many batches; a slow browser must not make the layer drop them silently
            # (the consumer also refills any gap from the database).
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SPECDASH_QUEUE", f"specdash-{SPECDASH_INSTANCE}")
CELERY_TASK_IGNORE_RESULT = True
# Only the host probes (connection test, model listing) return results: the web tier holds no SSH keys, so it
# asks a worker and waits for the answer.
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = 600
# One run owns a worker slot for minutes; never prefetch a second one behind it, and redeliver the task
# if the worker dies mid-run (the orchestrator resumes from the run's stored facts).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 6 * 3600}
# A broker restart must not take the worker down: Redis is only the doorbell, the runs' facts are in the database
# and their servers keep running. The transport turns kombu's failure to close a dropped connection under a
# running task into a reconnect (dashboard/broker.py); the worker then waits for the broker for as long as it
# takes, from its start too, and leaves its running runs alone meanwhile (cancelling one would only make another
# worker re-attach to it later).
CELERY_BROKER_TRANSPORT = "dashboard.broker:Transport"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# Every password a person sets runs these: the admin site's forms, `createsuperuser` (interactive, and from
# DJANGO_SUPERUSER_PASSWORD: dashboard/management/commands/createsuperuser.py) and `changepassword`. Only the
# local demo sets its well-known demo/demo directly (dashboard/demo).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},  # the 20,000 most common
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment_list"
LOGOUT_REDIRECT_URL = "login"
# Login throttling (django-axes): after SPECDASH_LOGIN_FAILURE_LIMIT failed logins for one username from one
# address, that pair is locked out for SPECDASH_LOGIN_COOLOFF_MINUTES; after SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT
# for one username from any addresses, the account is (dashboard/login_throttle.py). Only the login form
# authenticates with a password; the API's bearer tokens and `force_login` never pass through here.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = _env_bool("SPECDASH_LOGIN_THROTTLE", True)
AXES_FAILURE_LIMIT = int(os.environ.get("SPECDASH_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("SPECDASH_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Higher than the limit per address: one user mistyping from one place never reaches it; a guess spread over
# addresses does, after at most this many tries per cool-off.
SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT = int(os.environ.get("SPECDASH_LOGIN_ACCOUNT_FAILURE_LIMIT", "20"))
AXES_HANDLER = "dashboard.login_throttle.LoginThrottle"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "dashboard.login_throttle.lockout_response"
# The address is REMOTE_ADDR: behind a proxy, daphne's --proxy-headers sets it from X-Forwarded-For, which the
# proxy must overwrite (docs/team.md, "Deploying for a team").
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves from the finders (no collectstatic needed) but wants its root to exist.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "dashboard.static_finders.PlotlyFinder",  # plotly.js from the installed plotly package, and only it
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
# Collected static files: `manage.py collectstatic` first, then hashed names that browsers cache for good
# (`immutable`) and gzip copies made once (plotly.js: 4.8 MB -> 1.5 MB). Production and `make demo` serve them so;
# tests and a bare `runserver` read the sources through the finders, so an edit shows without collecting.
STATIC_COLLECTED = _env_bool("SPECDASH_STATIC_COLLECTED", PRODUCTION)
if STATIC_COLLECTED:
    STORAGES["staticfiles"] = {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}
    WHITENOISE_USE_FINDERS = False

# Security headers on every page, in every mode. The pages load only their own static scripts (no inline script,
# no event handler attribute; data goes through `json_script`), so scripts need no nonce, and none evaluates a
# string (no 'unsafe-eval': the charts draw with SVG, never plotly.js's WebGL traces, whose shaders are compiled
# from strings). Styles allow inline: plotly.js and Swagger UI set style attributes as they draw. The policy is
# enforced in every mode, the demo and the tests too, so a page that would break under it breaks where it is
# written: the browser tests walk the pages and draw their charts with the console watched for a refusal.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Pages that open specdash stay cut off from it; a window specdash opens (Perfetto's UI, handed a profile trace by
# postMessage from the run page) keeps its opener, which "same-origin" would sever.
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin-allow-popups"
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and overwrites any a client sent).
if _env_bool("SPECDASH_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = _env_bool("SPECDASH_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("SPECDASH_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SPECDASH_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = _env_bool("SPECDASH_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Asking browsers to preload the domain is a commitment its owner makes (hstspreload.org), not a default.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# specdash's own knobs
# Where workers may connect: IP networks (CIDR) and exact host names (dashboard/checks.py refuses a malformed
# entry). A development checkout reaches only this machine; production starts with nothing until it is set.
SPECDASH_HOST_ALLOWLIST = tuple(
    _env_list("SPECDASH_HOST_ALLOWLIST", "" if PRODUCTION else "127.0.0.0/8,::1/128,localhost")
)
SPECDASH_SSH_KEY_DIR = Path(os.environ.get("SPECDASH_SSH_KEY_DIR", VAR_DIR / "ssh"))
SPECDASH_CONNECT_TIMEOUT = float(os.environ.get("SPECDASH_CONNECT_TIMEOUT", "15"))
# A flood is stored and broadcast in batches of up to this many lines: each batch costs a fixed share (a commit,
# the live series stored and broadcast) that bigger batches spread thinner (bench/README.md: log_pipeline.py).
SPECDASH_LOG_BATCH_LINES = int(os.environ.get("SPECDASH_LOG_BATCH_LINES", "20000"))
SPECDASH_LOG_BATCH_GAP = float(os.environ.get("SPECDASH_LOG_BATCH_GAP", "0.02"))
SPECDASH_TEARDOWN_GRACE = float(os.environ.get("SPECDASH_TEARDOWN_GRACE", "10"))
# How often a run samples its GPUs' clocks, temperature, power and clock event reasons (nvidia-smi -lms); 0: never.
SPECDASH_TELEMETRY_MS = int(os.environ.get("SPECDASH_TELEMETRY_MS", "1000"))
# How often the benchmark client scrapes the server's /metrics gauges during a cell: 0 (never) or 50-10000 ms.
SPECDASH_SERVER_METRICS_MS = int(os.environ.get("SPECDASH_SERVER_METRICS_MS", "250"))
# A worker that dies mid-run stops beating; after SPECDASH_HEARTBEAT_STALE seconds another worker re-attaches
# (checked every SPECDASH_REATTACH_EVERY seconds by the beat). A dropped SSH connection is retried for
# SPECDASH_RECONNECT_WINDOW seconds before the run fails.
SPECDASH_HEARTBEAT_STALE = float(os.environ.get("SPECDASH_HEARTBEAT_STALE", "20"))
SPECDASH_REATTACH_EVERY = float(os.environ.get("SPECDASH_REATTACH_EVERY", "10"))
SPECDASH_RECONNECT_WINDOW = float(os.environ.get("SPECDASH_RECONNECT_WINDOW", "60"))
# A run's database writes wait out a database outage (a restart, a failover) for SPECDASH_DB_OUTAGE_WINDOW
# seconds; after a longer one its worker leaves it, untouched, for the re-attach above (workers/run/database.py).
SPECDASH_DB_OUTAGE_WINDOW = float(os.environ.get("SPECDASH_DB_OUTAGE_WINDOW", "30"))
# Queued runs are woken by a message when they are queued and when the host frees up; a message lost on the way
# (a Redis restart, a flush) is made good by the beat within SPECDASH_WAKE_EVERY seconds.
SPECDASH_WAKE_EVERY = float(os.environ.get("SPECDASH_WAKE_EVERY", "30"))
# The longest a run may own a worker slot (its task is then stopped; the beat hands a live run to another worker).
SPECDASH_RUN_TIME_LIMIT = int(os.environ.get("SPECDASH_RUN_TIME_LIMIT", str(24 * 3600)))
# How often the beat reads every host's GPU memory (the Hosts page), and launches scheduled experiments that are due.
# Profiler traces (workers/run/profiling.py): the steps /start_profile records at each concurrency, and the largest
# rank trace (gzipped bytes) fetched and stored; a larger one is refused with a message and the run goes on.
SPECDASH_PROFILE_STEPS = int(os.environ.get("SPECDASH_PROFILE_STEPS", "24"))
SPECDASH_PROFILE_TRACE_MAX_BYTES = int(os.environ.get("SPECDASH_PROFILE_TRACE_MAX_BYTES", str(64 * 1024 * 1024)))
# What one run may store, unless its host sets its own (`Host.run_log_cap_mib`, `run_trace_cap_mib`): MiB of server
# log text (a healthy run logs a few MiB an hour; a flood past this is cut, the rest left on the host) and MiB of
# profiler traces (four of the largest rank traces; the rest are left on the host).
SPECDASH_RUN_LOG_CAP_MIB = int(os.environ.get("SPECDASH_RUN_LOG_CAP_MIB", "64"))
SPECDASH_RUN_TRACE_CAP_MIB = int(os.environ.get("SPECDASH_RUN_TRACE_CAP_MIB", "256"))
SPECDASH_GPU_READ_EVERY = float(os.environ.get("SPECDASH_GPU_READ_EVERY", "60"))
SPECDASH_SCHEDULE_EVERY = float(os.environ.get("SPECDASH_SCHEDULE_EVERY", "60"))

# Notifications. Links in messages start with SPECDASH_BASE_URL (the address people open specdash at). E-mail goes
# through Django's mail backend: SMTP when EMAIL_HOST is set, else the console (the worker's log). A failed e-mail
# or webhook is retried SPECDASH_NOTIFY_RETRIES times, SPECDASH_NOTIFY_RETRY_DELAY seconds apart, doubling. Webhook
# URLs are set by admins only; SPECDASH_WEBHOOK_HOSTS, when set, lists the only hosts they may point at.
SPECDASH_BASE_URL = os.environ.get("SPECDASH_BASE_URL", "http://127.0.0.1:8000")
DEFAULT_FROM_EMAIL = os.environ.get("SPECDASH_FROM_EMAIL", "specdash@localhost")
if os.environ.get("EMAIL_HOST"):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = os.environ["EMAIL_HOST"]
    EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = _env_bool("EMAIL_USE_TLS", True)
    EMAIL_TIMEOUT = 20
else:
    EMAIL_BACKEND = os.environ.get("SPECDASH_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
SPECDASH_NOTIFY_RETRIES = int(os.environ.get("SPECDASH_NOTIFY_RETRIES", "5"))
# Launches a member may have queued or running at once, and a host may hold queued or running (admins are exempt;
# an admin's value on the member or the host replaces these defaults).
SPECDASH_QUOTA_LAUNCHES_PER_USER = int(os.environ.get("SPECDASH_QUOTA_LAUNCHES_PER_USER", "200"))
SPECDASH_QUOTA_LAUNCHES_PER_HOST = int(os.environ.get("SPECDASH_QUOTA_LAUNCHES_PER_HOST", "500"))
# GPU-hours a member's launches, and all launches on one host, may take in 24 h; a queued or running launch counts at
# the bound of its profile's timeouts (experiments/rules/gpu_hours.py). An admin's value on the member or the host
# (Team and Host pages) replaces these defaults.
SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = float(os.environ.get("SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY", "5000"))
SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY = float(os.environ.get("SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY", "20000"))
SPECDASH_NOTIFY_RETRY_DELAY = float(os.environ.get("SPECDASH_NOTIFY_RETRY_DELAY", "30"))
SPECDASH_WEBHOOK_HOSTS = tuple(_env_list("SPECDASH_WEBHOOK_HOSTS", ""))
# Webhooks post only to public addresses; networks listed here (CIDR, comma-separated) are allowed too, e.g. the
# private address of a team's Slack relay. Checked when an admin saves a webhook and before every delivery.
SPECDASH_WEBHOOK_ALLOWED_NETWORKS = tuple(_env_list("SPECDASH_WEBHOOK_ALLOWED_NETWORKS", ""))
# The model directories under a host's models root that the new-experiment and study forms start with: the target,
# then its draft. By default the demo's simulated ones; empty, the forms start with no model path.
SPECDASH_SUGGESTED_MODELS = tuple(_env_list("SPECDASH_SUGGESTED_MODELS", f"{suggestions.TARGET},{suggestions.DRAFT}"))

CELERY_BEAT_SCHEDULE = {
    "reattach-stale-runs": {"task": "workers.tasks.reattach_stale_runs", "schedule": SPECDASH_REATTACH_EVERY},
    "wake-idle-hosts": {"task": "workers.tasks.wake_idle_hosts", "schedule": SPECDASH_WAKE_EVERY},
    "advance-studies": {"task": "workers.tasks.advance_studies", "schedule": SPECDASH_WAKE_EVERY},
    "read-host-gpus": {"task": "workers.tasks.read_host_gpus", "schedule": SPECDASH_GPU_READ_EVERY},
    "launch-scheduled-experiments": {
        "task": "workers.tasks.launch_scheduled_experiments",
        "schedule": SPECDASH_SCHEDULE_EVERY,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # axes: lockouts (warnings), not every failed login or its start-up banner.
    "loggers": {"asyncssh": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
