"""`python manage.py remind USER --in 5 [--wait]`: enqueue a reminder, optionally wait for it."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from reminders.client import jobs


class Command(BaseCommand):
    help = "Enqueue a reminder for USER, due in --in seconds; --wait for what its handler returned."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", type=int)
        parser.add_argument("--in", dest="delay", type=float, default=0.0)
        parser.add_argument("--wait", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = settings.SHARDQ["QUEUE"]
        job_id = jobs().enqueue(
            queue, "reminder", {"user": options["user"]}, delay=options["delay"], keep_result=600
        )
        self.stdout.write(f"enqueued {job_id}")
        if options["wait"]:
            result = jobs().result(queue, job_id, timeout=options["delay"] + 60)
            self.stdout.write(f"result: {result}")
