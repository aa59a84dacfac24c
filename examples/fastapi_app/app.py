"""A FastAPI app that enqueues a job and awaits its result.

    uvicorn app:app          # with `shardq dispatcher run -q reports` and
                             # `shardq worker run -q reports --handlers jobs:handlers` running

POST /reports starts a report and returns its job id at once; GET /reports/{id}?wait=10
waits up to 10 s for the result (the wait is a pub/sub subscription, no polling loop).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from shardq import AsyncClient, RedisSettings
from shardq.errors import JobFailedError, ResultNotFoundError, ResultTimeoutError

QUEUE = "reports"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One client for the app's life: it holds the connections and the queue's layout.
    app.state.jobs = await AsyncClient.from_url(RedisSettings.from_env())
    await app.state.jobs.create_queue(QUEUE, partitions=16)  # safe to repeat
    yield
    await app.state.jobs.close()


app = FastAPI(lifespan=lifespan)


class ReportRequest(BaseModel):
    rows: int


@app.post("/reports", status_code=202)
async def start_report(request: ReportRequest) -> dict[str, str]:
    job_id = await app.state.jobs.enqueue(
        QUEUE, "report.render", {"rows": request.rows}, keep_result=3600, timeout=60
    )
    return {"job_id": job_id}


@app.get("/reports/{job_id}")
async def report(job_id: str, wait: float = 0.0) -> dict[str, Any]:
    jobs: AsyncClient = app.state.jobs
    try:
        return {"state": "done", "result": await jobs.result(QUEUE, job_id, timeout=wait)}
    except ResultTimeoutError:
        info = await jobs.get(QUEUE, job_id)  # still waiting or running: say where it is
        return {"state": info.state if info else "unknown", "progress": info and info.progress}
    except JobFailedError as exc:
        return {"state": "dead", "error": exc.error}
    except ResultNotFoundError:
        raise HTTPException(404, f"no report {job_id}") from None
