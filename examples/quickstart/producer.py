"""Enqueue a reminder due in 5 seconds and wait for what its handler returned."""

from shardq import Client, RedisSettings

# RedisSettings.from_env(): SHARDQ_REDIS_URL, default redis://127.0.0.1:7000
with Client(RedisSettings.from_env()) as client:
    client.create_queue("reminders", partitions=16)  # once; safe to repeat
    job_id = client.enqueue("reminders", "reminder", {"user": 42}, delay=5, keep_result=3600)
    print("enqueued", job_id)
    print("result:", client.result("reminders", job_id, timeout=60))
