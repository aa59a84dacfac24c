"""Testing handlers: as plain functions (no Redis), then through a real worker."""

import pytest
from jobs import charge

from shardq import Client, Job, PermanentError, RetryAfter
from shardq.errors import JobFailedError


def make_job(payload: object, attempt: int = 1) -> Job:
    """A Job as a worker would hand it to the handler."""
    return Job(
        id="job-1",
        queue="payments",
        partition=0,
        type="charge",
        payload=payload,
        attempt=attempt,
        max_attempts=5,
        due_ms=None,
    )


def test_charge_returns_what_it_charged() -> None:
    assert charge(make_job({"cents": 500}, attempt=2)) == {"charged": 500, "attempt": 2}


def test_a_bad_amount_is_permanent() -> None:
    with pytest.raises(PermanentError, match="cannot charge -1 cents"):
        charge(make_job({"cents": -1}))


def test_a_busy_gateway_retries_in_10_s() -> None:
    with pytest.raises(RetryAfter) as raised:
        charge(make_job({"cents": 500, "gateway_busy": True}))
    assert raised.value.delay == 10


def test_through_a_worker(client: Client, queue: str, running_worker: object) -> None:
    job_id = client.enqueue(queue, "charge", {"cents": 500}, keep_result=60)
    assert client.result(queue, job_id, timeout=30) == {"charged": 500, "attempt": 1}


def test_a_permanent_error_goes_dead(client: Client, queue: str, running_worker: object) -> None:
    job_id = client.enqueue(queue, "charge", {"cents": 0}, keep_result=60)
    with pytest.raises(JobFailedError) as raised:
        client.result(queue, job_id, timeout=30)
    assert "cannot charge 0 cents" in (raised.value.error or "")
    assert client.get(queue, job_id).state == "dead"
