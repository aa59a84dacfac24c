"""`python manage.py run_jobs`: a shardq dispatcher and worker for settings.SHARDQ's queue,
until Ctrl-C or SIGTERM (then running jobs finish within the worker's shutdown grace).

A management command is how the handlers get Django's settings and apps loaded before they
run.  In production run one per container, as many as the load needs: dispatchers and
workers share the queue's partitions between them by themselves."""

import asyncio
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils.module_loading import import_string

from reminders.client import jobs
from shardq import Dispatcher, RedisSettings, Worker, WorkerSettings, connect_async


class Command(BaseCommand):
    help = "Run a shardq dispatcher and worker for settings.SHARDQ until Ctrl-C or SIGTERM."

    def handle(self, *args: Any, **options: Any) -> None:
        jobs()  # the queue exists before its processes start
        asyncio.run(self.serve())

    async def serve(self) -> None:
        conf = settings.SHARDQ
        redis = await connect_async(RedisSettings.from_url(conf["URL"]))
        dispatcher = Dispatcher(redis, conf["QUEUE"])
        worker = Worker(
            redis,
            conf["QUEUE"],
            handlers=import_string(conf["HANDLERS"]),
            settings=WorkerSettings(concurrency=conf["CONCURRENCY"]),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: (dispatcher.stop(), worker.stop()))
        self.stdout.write(f"serving {conf['QUEUE']}", ending="\n")
        self.stdout.flush()
        try:
            await asyncio.gather(dispatcher.run(), worker.run())
        finally:
            await redis.aclose()
