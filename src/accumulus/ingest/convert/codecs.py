"""Each variable's codecs: ``--codec`` options, else the source's HDF5 filters mapped to
codecs, resolved for the array and checked for the Zarr format."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from accumulus.errors import AccumulusError
from accumulus.filters import (
    ArrayLayout,
    CodecConfig,
    FilterError,
    HDF5Filter,
    default_registry,
    for_array,
    numcodecs_codec,
    v3_codecs,
)

CodecSpec = Mapping[str, Any] | Sequence[Mapping[str, Any]]
# What NetCDF-3 variables are written with (no compression to keep): zarr-python's default.
NETCDF3_CODEC: CodecConfig = {"id": "zstd", "level": 0}


def parse_codec_options(
    options: Sequence[str],
) -> tuple[dict[str, CodecSpec], CodecSpec | None]:
    """``--codec VAR='<json>'`` and ``--codec '<json>'`` (the default for all variables) as
    (per-variable codecs, default). JSON is one codec object or a list of them."""
    per_variable: dict[str, CodecSpec] = {}
    default: CodecSpec | None = None
    for option in options:
        text = option.strip()
        name, _, body = ("", "", text) if text[:1] in "{[" else text.partition("=")
        label = f"--codec {name}" if name else "--codec"
        if not body.strip():
            raise AccumulusError(f"{label}: expected VAR='<json>' or '<json>', got {option!r}")
        try:
            spec = json.loads(body)
        except json.JSONDecodeError as exc:
            raise AccumulusError(f"{label}: invalid JSON {body!r}: {exc}") from None
        if not isinstance(spec, dict | list):
            raise AccumulusError(f"{label}: expected a JSON object or list, got {body!r}")
        if name:
            per_variable[name.strip().strip("/")] = spec
        elif default is not None:
            raise AccumulusError("--codec: more than one default codec given")
        else:
            default = spec
    return per_variable, default


def as_chain(spec: CodecSpec | None, label: str) -> list[CodecConfig]:
    chain = [spec] if isinstance(spec, Mapping) else list(spec or [])
    for config in chain:
        if not isinstance(config, Mapping):
            raise AccumulusError(f"--codec {label}: expected a JSON object or list, got {config!r}")
        try:
            numcodecs_codec(config)  # unknown id or keys: numcodecs' verdict, in one line
        except FilterError as exc:
            raise AccumulusError(f"--codec {label}: {exc}") from None
    return [dict(config) for config in chain]


def resolve_chain(
    path: str,
    where: str,
    layout: ArrayLayout,
    text: bool,
    kept: Callable[[], list[CodecConfig]],
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
    zarr_format: int,
) -> list[CodecConfig]:
    """A variable's codecs: its --codec, else the default --codec, else ``kept()`` (what the
    source's filters map to), resolved for the array and checked for the Zarr format."""
    try:
        if path in overrides:
            chain = overrides[path]
        elif default is not None and not text:
            chain = default
        else:
            chain = kept()
        if not text:
            chain = for_array(chain, layout.dtype, layout.shape, layout.chunks)
        _check_codecs(chain, zarr_format, text)
    except FilterError as exc:
        raise AccumulusError(f"{where}: {exc}") from None
    return chain


def check_codec_sides(pipeline: Sequence[HDF5Filter]) -> None:
    registry = default_registry()
    for stage in pipeline:
        side = registry.codec_side(stage.hdf5_id)
        problem = side.availability()
        if problem:
            raise FilterError(
                f"HDF5 filter {stage.hdf5_id} ({stage.name}) maps to codec {side.codec_id!r}, "
                f"which is not usable here ({problem})"
            )


def _check_codecs(chain: list[CodecConfig], zarr_format: int, text: bool) -> None:
    if text and chain:
        raise FilterError("variable-length strings take no HDF5 filters; remove its --codec")
    if zarr_format == 3:
        v3_codecs(chain)
    else:
        for config in chain:
            numcodecs_codec(config)


def retyped(chain: list[CodecConfig]) -> list[CodecConfig]:
    """A variable's codec chain for its decoded values: element sizes follow the new type;
    codecs bound to the packed type cannot be kept."""
    out = []
    for config in chain:
        if "dtype" in config or "astype" in config:
            raise FilterError(
                f"codec {config.get('id')!r} works on the packed type, but the values are "
                "stored decoded (float32 packing: Zarr attributes cannot say float32)"
            )
        out.append({**config, "elementsize": 0} if "elementsize" in config else dict(config))
    return out
