"""``shardq web``: a server-rendered console over the inspector and the control operations.

The stack is Starlette on uvicorn, with Jinja2 templates:

- **Starlette** is a small, typed ASGI toolkit maintained by the encode team (who also keep
  uvicorn and httpx), with routing, form parsing, static files, cookies, a lifespan hook and
  an in-process test client, and nothing else to configure.  shardq already talks to Redis
  through redis-py's asyncio client (:class:`shardq.aio.AsyncClient`, the
  :class:`~shardq.inspector.AsyncInspector`), so an ASGI app awaits the same bounded plans the
  CLI runs, on one event loop, with no thread pool in between.  aiohttp would do as well, but
  brings its own HTTP client and server stack beside the one shardq's tests already use
  (httpx), and its test client is tied to pytest-aiohttp.
- **uvicorn** is the reference ASGI server, pure Python with optional speedups, and stops
  gracefully on SIGTERM (a Kubernetes rollout).
- **Jinja2** autoescapes every value (job payloads and error texts are untrusted input).

Every asset (CSS, one small script that polls ``/live/...`` for fresh figures) ships in this
package (``static/``, ``templates/``): no CDN, so the console works on an air-gapped network.
The pages send a Content-Security-Policy that allows only this origin's scripts and styles.

Safety (see :mod:`shardq.web.auth` and docs/deploy.md): the Host header must name the console
(no DNS rebinding); every page needs the operator token (``SHARDQ_WEB_TOKEN``: bearer header, or
a login form that sets a session cookie) when it listens beyond loopback or with
``--require-login``, and it refuses to start beyond loopback without one; wrong tokens are rate
limited per client.  It is read-only unless started with ``--allow-actions``; actions then
need the token, a CSRF token on every form POST, a confirmation step for destructive ones,
and each is logged as a JSON event (``web.action``) with who and what.  A read-only console
can run as the ``viewer`` Redis user (:mod:`shardq.admin.acl`), which Redis lets write nothing.

Install with ``pip install 'shardq[web]'``.
"""

from __future__ import annotations

from shardq.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]
