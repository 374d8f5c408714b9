"""``/api/health``: whether every store can be read, and whether computations are stuck."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from accumulus.decoded_chunks import DECODED
from accumulus.service import schemas
from accumulus.service.state import ServiceDep

# /api/health waits up to this long for fresh snapshot reads when no computation runs; while
# some run it answers at once with the last ones read (and starts reading afresh).
HEALTH_WAIT_IDLE_SECONDS = 1.0

router = APIRouter(tags=["service"])


@router.get(
    "/api/health",
    response_model=schemas.Health,
    responses={503: {"model": schemas.Health, "description": "A computation is stuck."}},
)
async def health_check(service: ServiceDep) -> JSONResponse:
    """Whether every store can be read, with its current snapshot token, and how many
    computations run in the process that answered (``process``: one of ``serve --workers``).
    Answers at once even when the service is saturated (then with the tokens read by the
    previous call). A computation holding its slot past ``ServiceLimits.stuck_seconds``
    makes it "unhealthy", with status 503: the process needs a restart. Also what the
    process's decoded-chunk cache holds (with ``shared``: what all the workers hold) and how
    often it served a read."""
    busy = service.busy
    wait = 0.0 if busy else HEALTH_WAIT_IDLE_SECONDS
    tokens = await service.health.tokens(wait)
    held = service.held_longest()
    status = "ok"
    if any(t.startswith("error: ") for t in tokens.values()):
        status = "degraded"
    if held > service.limits.stuck_seconds:
        status = "unhealthy"
    body = {
        "status": status,
        "datasets": tokens,
        "computations": busy,
        "longest_computation_seconds": round(held, 3),
        "process": os.getpid(),
        "decoded_chunks": {
            "limit_bytes": DECODED.limit,
            "held_bytes": DECODED.held,
            "hits": DECODED.hits,
            "misses": DECODED.misses,
            "shared": DECODED.shared is not None,
            "shared_errors": 0 if DECODED.shared is None else DECODED.shared.errors,
        },
    }
    return JSONResponse(body, 503 if status == "unhealthy" else 200)
