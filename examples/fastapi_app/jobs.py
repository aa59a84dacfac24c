"""The report renderer the web app's jobs run: `shardq worker run --handlers jobs:handlers`."""

import asyncio

from shardq import Job


async def render_report(job: Job) -> dict[str, object]:
    rows = job.payload["rows"]
    for done in range(0, rows + 1, max(1, rows // 4)):
        job.progress({"done": done, "of": rows})  # readable while it runs: client.get()
        await asyncio.sleep(0.05)
    return {"url": f"https://reports.example.com/{job.id}.pdf", "rows": rows}


handlers = {"report.render": render_report}
