"""The shapes of the service's JSON responses, for its OpenAPI document (and for checking
that ``/api/datasets`` says what the document says)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

Label = str | float | int | None  # a coordinate value: ISO 8601 for times, else a number


class ErrorBody(BaseModel):
    error: str = Field(description="What is wrong, in one line.")
    parameter: str | None = Field(
        description="The request parameter at fault (a dimension name for a range), if any."
    )


class Dimension(BaseModel):
    size: int
    kind: str | None = Field(description='"time", "latitude", "longitude" or null.')
    first: Label
    last: Label
    ascending: bool
    units: str | None


class Coverage(BaseModel):
    covered: int = Field(description="Leading raw indices the accumulations cover.")
    size: int
    through: Label = Field(description="Coordinate of the last covered index.")


class Combination(BaseModel):
    dims: list[str]
    strides: list[int]


class Accumulation(BaseModel):
    weights: str
    complete: bool = Field(description="False while a build is unfinished (then unused).")
    producer: str
    combinations: list[Combination]
    coverage: dict[str, Coverage]


class Variable(BaseModel):
    name: str
    dims: list[str]
    shape: list[int]
    dtype: str
    units: str | None
    long_name: str | None
    accumulation: Accumulation | None
    stale: str | None = Field(
        description="Why the sidecar's accumulations of this variable are not used (its "
        "source changed since they were taken), and how to refresh them; null otherwise."
    )


class Dataset(BaseModel):
    name: str
    snapshot: str = Field(description="Token of the metadata snapshot described.")
    zarr_format: int
    consolidated: bool
    dimensions: dict[str, Dimension]
    variables: list[Variable]


class DatasetList(BaseModel):
    datasets: list[Dataset]
    unavailable: dict[str, str] = Field(
        description="Datasets that cannot be read now, with the reason."
    )


class Plan(BaseModel):
    accumulation_chunks_read: int
    raw_chunks_read: int
    bytes_read: int
    requests: int
    seconds: float
    estimated_seconds: float | None = Field(
        description="The planner's estimate of this plan's time (reading, decoding, summing)."
    )


class AverageResult(BaseModel):
    """The JSON of ``accumulus average --json``."""

    variable: str
    stat: str
    weights: str
    over: list[str]
    dims: list[str] = Field(description="Dimensions of the answer (those not averaged over).")
    coords: dict[str, list[Label]]
    values: Any = Field(
        description=(
            'Nested lists, one level per dimension; null = missing; "inf" and "-inf" for '
            "infinities (JSON has no number for them)."
        )
    )
    units: str | None
    plan: Plan = Field(description="What answering cost: chunks and bytes read, seconds.")
    note: str = Field(description="Why accumulations were not (fully) used, when they were not.")


class DecodedChunksHeld(BaseModel):
    limit_bytes: int = Field(description="The most it keeps (0: nothing kept).")
    held_bytes: int = Field(description="Decoded bytes it keeps now (shared: all workers').")
    hits: int = Field(description="Reads served from it since the process started.")
    misses: int = Field(description="Reads of chunks it did not hold (then read and decoded).")
    shared: bool = Field(description="Whether the workers share it (files in /dev/shm).")
    shared_errors: int = Field(
        description="Errors of the shared store (each a miss, the chunk decoded here)."
    )


class Health(BaseModel):
    status: str = Field(
        description='"ok"; "degraded" when a store cannot be read; "unhealthy" (status 503) '
        "when a computation has held its slot past the request limit plus one read's."
    )
    datasets: dict[str, str] = Field(description="Snapshot token (or error) per dataset.")
    computations: int = Field(description="Answers being computed now by this process.")
    longest_computation_seconds: float = Field(
        description="How long the oldest running computation has held its slot (0: none)."
    )
    process: int = Field(
        description="The id of the process that answered (one of `serve --workers N`)."
    )
    decoded_chunks: DecodedChunksHeld = Field(
        description="The cache of decoded accumulation chunks (`--chunk-cache-mb`): this "
        "process's, or the one the workers share."
    )
