"""specdash settings: every knob is an environment variable with a safe default (see README)."""

import os
from pathlib import Path

import dj_database_url
import plotly

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SPECDASH_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY and DEBUG:
    # Only a debug (demo/dev) instance may run with a throwaway key; the system check refuses otherwise.
    SECRET_KEY = "insecure-dev-only-key-do-not-use-in-production"
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "experiments",
    "workers",
    "dashboard.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": os.environ.get("SPECDASH_CHANNEL_PREFIX", "specdash"),
            # A log flood sends many batches; a slow browser must not make the layer drop them silently
            # (the consumer also refills any gap from the database).
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SPECDASH_QUEUE", "specdash")
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

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment_list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves from the finders (no collectstatic needed) but wants its root to exist.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# plotly.js comes from the installed plotly package, so the page and the Python figures always agree on the
# version and no CDN is needed.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", Path(plotly.__file__).resolve().parent / "package_data"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# specdash's own knobs
SPECDASH_SSH_KEY_DIR = Path(os.environ.get("SPECDASH_SSH_KEY_DIR", VAR_DIR / "ssh"))
SPECDASH_CONNECT_TIMEOUT = float(os.environ.get("SPECDASH_CONNECT_TIMEOUT", "15"))
SPECDASH_LOG_BATCH_LINES = int(os.environ.get("SPECDASH_LOG_BATCH_LINES", "10000"))
SPECDASH_LOG_BATCH_SECONDS = float(os.environ.get("SPECDASH_LOG_BATCH_SECONDS", "0.1"))
SPECDASH_TEARDOWN_GRACE = float(os.environ.get("SPECDASH_TEARDOWN_GRACE", "10"))
# A worker that dies mid-run stops beating; after SPECDASH_HEARTBEAT_STALE seconds another worker re-attaches
# (checked every SPECDASH_REATTACH_EVERY seconds by the beat). A dropped SSH connection is retried for
# SPECDASH_RECONNECT_WINDOW seconds before the run fails.
SPECDASH_HEARTBEAT_STALE = float(os.environ.get("SPECDASH_HEARTBEAT_STALE", "20"))
SPECDASH_REATTACH_EVERY = float(os.environ.get("SPECDASH_REATTACH_EVERY", "10"))
SPECDASH_RECONNECT_WINDOW = float(os.environ.get("SPECDASH_RECONNECT_WINDOW", "60"))
CELERY_BEAT_SCHEDULE = {
    "reattach-stale-runs": {"task": "workers.tasks.reattach_stale_runs", "schedule": SPECDASH_REATTACH_EVERY},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"asyncssh": {"level": "WARNING"}},
}
