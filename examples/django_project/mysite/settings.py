"""A Django project as small as it gets, with shardq configured in settings."""

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = True
USE_TZ = True
INSTALLED_APPS = ["reminders"]
DATABASES: dict[str, dict[str, str]] = {}  # the example needs none
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"  # mails go to stdout

# What the management commands read: where Redis is, the queue, the handlers, the worker.
SHARDQ = {
    "URL": os.environ.get("SHARDQ_REDIS_URL", "redis://127.0.0.1:7000"),
    "QUEUE": "mail",
    "PARTITIONS": 16,
    "HANDLERS": "reminders.jobs.handlers",
    "CONCURRENCY": 16,
}
