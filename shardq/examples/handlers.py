"""An example handler module: what the workers of k8s/base (``SHARDQ_HANDLERS`` in
configmap.yaml) and of docker-compose.cluster.yml run until you ship your own.

Copy it to start yours: a module with a dict ``handlers`` of job type -> function, given to the
worker as ``shardq worker run --handlers yourapp.jobs:handlers``, in an image built ``FROM``
shardq's with your package installed (docs/deploy.md, "Your handlers").  It lives in the shardq
package only so the stock image has it; nothing in shardq imports it.

Try it against a running deployment: ``shardq job enqueue -q demo demo --payload '{"n": 1}'``.
"""

from __future__ import annotations

import logging

from shardq import Job, PermanentError

log = logging.getLogger(__name__)
_JSON_KINDS = {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}


async def demo(job: Job) -> None:
    """The ``demo`` job type: log that the job ran, and succeed.

    Returning is success (the job is acknowledged); raising any exception retries it with its
    backoff; ``PermanentError`` dead-letters it at once, as here for a payload that is not a
    JSON object.  Only the job's id and attempt are logged, never its payload (it may hold data
    that logs should not)."""
    if job.payload is not None and not isinstance(job.payload, dict):
        kind = _JSON_KINDS.get(type(job.payload), "value")
        why = f"a demo job takes a JSON object or no payload; this one is a JSON {kind}"
        raise PermanentError(why)
    log.info("demo job ran", extra={"job_id": job.id, "attempt": job.attempt})


handlers = {"demo": demo}
"""Job type -> handler, the shape ``--handlers module:attribute`` expects."""
