"""``/api/datasets``: what each dataset holds (dimensions, coordinate ranges, variables,
accumulations and how far they cover)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from accumulus.service import schemas
from accumulus.service.describe import describe_snapshot
from accumulus.service.errors import ERRORS, ServiceError
from accumulus.service.state import ServiceDep

# A dataset named in a path (the OpenAPI document lists the names: ``app.openapi_document``).
DatasetName = Annotated[str, Path(description="A dataset (store) name.")]

router = APIRouter(tags=["datasets"])


@router.get("/api/datasets", response_model=schemas.DatasetList, responses={503: ERRORS[503]})
def list_datasets(service: ServiceDep) -> dict[str, Any]:
    """Datasets, their dimensions and coordinate ranges, variables and units, and which
    accumulations exist and how far they cover. Datasets that cannot be read now are
    listed apart, with the reason."""
    described, unavailable = [], {}
    for dataset in service.catalog:
        try:
            described.append(describe_snapshot(service.snapshot_of(dataset)))
        except ServiceError as exc:
            unavailable[dataset.name] = str(exc)
    return {"datasets": described, "unavailable": unavailable}


@router.get(
    "/api/datasets/{dataset}",
    response_model=schemas.Dataset,
    responses={404: ERRORS[404], 503: ERRORS[503]},
)
def get_dataset(dataset: DatasetName, service: ServiceDep) -> dict[str, Any]:
    """One dataset, as in the list."""
    return describe_snapshot(service.snapshot_of(service.dataset(dataset)))
