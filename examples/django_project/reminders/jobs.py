"""The job handlers of the app.  Plain (sync) functions run in the worker's thread pool, so
they may use Django's ORM and mail as any view does (call
django.db.close_old_connections() around ORM work in a long-lived worker, as Django's own
request cycle does)."""

from django.core.mail import send_mail

from shardq import Job, PermanentError


def send_reminder(job: Job) -> str:
    user = job.payload.get("user")
    if not isinstance(user, int):
        raise PermanentError(f"a reminder needs a user id, got {user!r}")  # dead at once
    send_mail("Reminder", f"Hello user {user}", "noreply@example.com", [f"u{user}@example.com"])
    return "sent"


handlers = {"reminder": send_reminder}
