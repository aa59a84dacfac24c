"""One shardq client per process, made from settings.SHARDQ on first use."""

from functools import cache

from django.conf import settings

from shardq import Client, RedisSettings


@cache
def jobs() -> Client:
    client = Client.from_url(RedisSettings.from_url(settings.SHARDQ["URL"]))
    client.create_queue(settings.SHARDQ["QUEUE"], settings.SHARDQ["PARTITIONS"])  # idempotent
    return client
