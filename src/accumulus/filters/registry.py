"""The filter registry: built-in sides plus plugins, paired by HDF5 id.

Plugins are found the way HDF5 scans ``HDF5_PLUGIN_PATH``, but through Python entry points:
every entry point in the group ``accumulus.filters`` loads to an ``HDF5Side`` or a
``CodecSide`` (a class, an instance, or a list of them). A package may provide one side or
both; a plugin's side replaces a built-in one for the same HDF5 id. Only complete pairs whose
two sides are available here are usable (the seed's pairing table).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from accumulus.filters.base import CodecConfig, CodecSide, FilterError, HDF5Side
from accumulus.filters.builtin import builtin_codec_sides, builtin_hdf5_sides

ENTRY_POINT_GROUP = "accumulus.filters"
_NO_CODEC_HINT = "a plugin could add one"


@dataclass(frozen=True)
class FilterPair:
    """One row of the pairing table."""

    hdf5_id: int
    name: str
    codec_id: str | None
    hdf5_provider: str | None
    codec_provider: str | None
    hdf5_problem: str | None  # None when the HDF5 side is available here
    codec_problem: str | None  # None when the codec side is available here
    same_bytes: bool | None

    @property
    def usable(self) -> bool:
        return self.hdf5_problem is None and self.codec_problem is None

    @property
    def reason(self) -> str:
        """Why the pair is not usable ("" when it is)."""
        return "; ".join(p for p in (self.hdf5_problem, self.codec_problem) if p)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable, "reason": self.reason}


class FilterRegistry:
    """HDF5 sides and codec sides by HDF5 id, and the conversions that use them."""

    def __init__(
        self,
        hdf5_sides: Iterable[HDF5Side],
        codec_sides: Iterable[CodecSide],
        problems: Sequence[str] = (),
    ) -> None:
        self.hdf5_sides = {side.hdf5_id: side for side in hdf5_sides}
        self.codec_sides = {side.hdf5_id: side for side in codec_sides}
        self.problems = list(problems)  # plugins that could not be loaded, for the table

    @classmethod
    def discover(cls, hdf5: bool = True) -> FilterRegistry:
        """Built-in sides, then every plugin of the ``accumulus.filters`` entry-point group.
        ``hdf5=False``: the codec sides only (listing hdf5plugin's filters imports h5py)."""
        hdf5_sides: list[HDF5Side] = builtin_hdf5_sides() if hdf5 else []
        codec_sides: list[CodecSide] = builtin_codec_sides()
        problems: list[str] = []
        for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_entry_key):
            try:
                sides = _plugin_sides(entry_point)
            except Exception as exc:  # a third-party plugin's: reported, not fatal (as in HDF5)
                problems.append(f"plugin {entry_point.name!r} ({entry_point.value}): {exc}")
                continue
            provider = entry_point.dist.name if entry_point.dist else entry_point.value
            for side in sides:
                side.provider = provider
                if isinstance(side, CodecSide):
                    codec_sides.append(side)
                elif hdf5:
                    hdf5_sides.append(side)
        return cls(hdf5_sides, codec_sides, problems)

    # Lookups -------------------------------------------------------------------------------

    def filter_name(self, hdf5_id: int) -> str:
        if hdf5_id in self.hdf5_sides:
            return self.hdf5_sides[hdf5_id].name
        if hdf5_id in self.codec_sides:
            return self.codec_sides[hdf5_id].codec_id
        return "unknown"

    def codec_side(self, hdf5_id: int) -> CodecSide:
        """The codec side of an HDF5 filter, or an error saying who would provide it."""
        if hdf5_id in self.codec_sides:
            return self.codec_sides[hdf5_id]
        if hdf5_id in self.hdf5_sides:
            side = self.hdf5_sides[hdf5_id]
            raise FilterError(
                f"HDF5 filter {hdf5_id} ({side.name}, from {side.provider}) has no Zarr codec "
                f"mapping; a package providing its codec side through the accumulus.filters "
                "entry-point group would make it usable"
            )
        raise FilterError(
            f"unknown HDF5 filter id {hdf5_id}: no installed package provides it; its HDF5 "
            "side would come from an HDF5 filter plugin (as hdf5plugin provides many) and its "
            "codec side from a package registering an accumulus.filters entry point"
        )

    def find_codec_side(self, codec_id: str) -> CodecSide | None:
        """The codec side whose codec id is ``codec_id``, if any."""
        return next((s for s in self.codec_sides.values() if s.codec_id == codec_id), None)

    def codec_side_for(self, config: Mapping[str, Any]) -> CodecSide:
        """The codec side for a codec JSON dictionary, checked to have a string ``id``."""
        if not isinstance(config, Mapping):
            raise FilterError(f"a codec must be a JSON object, got {config!r}")
        codec_id = config.get("id")
        if not isinstance(codec_id, str):
            raise FilterError(f"codec JSON {dict(config)} has no string 'id'")
        side = self.find_codec_side(codec_id)
        if side is not None:
            return side
        known = sorted(side.codec_id for side in self.codec_sides.values())
        raise FilterError(f"codec {codec_id!r} has no HDF5 filter mapping; known: {known}")

    # Conversions ---------------------------------------------------------------------------

    def hdf5_to_codec(self, hdf5_id: int, params: Sequence[int] = ()) -> CodecConfig:
        return self.codec_side(hdf5_id).to_codec(params)

    def codec_to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
        side = self.codec_side_for(config)
        return side.hdf5_id, side.to_hdf5(config)

    # The pairing table ---------------------------------------------------------------------

    def pair(self, hdf5_id: int) -> FilterPair:
        hdf5_side = self.hdf5_sides.get(hdf5_id)
        codec_side = self.codec_sides.get(hdf5_id)
        hdf5_problem: str | None
        codec_problem: str | None
        if hdf5_side is None:
            hdf5_problem = f"no installed package provides HDF5 filter {hdf5_id}"
        else:
            hdf5_problem = hdf5_side.availability()
        if codec_side is None:
            codec_problem = f"no codec mapping: {_NO_CODEC_HINT}"
        else:
            codec_problem = codec_side.availability()
        return FilterPair(
            hdf5_id=hdf5_id,
            name=self.filter_name(hdf5_id),
            codec_id=codec_side.codec_id if codec_side else None,
            hdf5_provider=hdf5_side.provider if hdf5_side else None,
            codec_provider=codec_side.provider if codec_side else None,
            hdf5_problem=hdf5_problem,
            codec_problem=codec_problem,
            same_bytes=codec_side.same_bytes if codec_side else None,
        )

    def pairs(self) -> list[FilterPair]:
        return [self.pair(i) for i in sorted(set(self.hdf5_sides) | set(self.codec_sides))]


def _entry_key(entry_point: EntryPoint) -> tuple[str, str]:
    return (entry_point.name, entry_point.value)


def _plugin_sides(entry_point: EntryPoint) -> list[HDF5Side | CodecSide]:
    loaded = entry_point.load()
    items = loaded if isinstance(loaded, list | tuple) else [loaded]
    sides: list[HDF5Side | CodecSide] = []
    for item in items:
        side = item() if isinstance(item, type) else item
        if not isinstance(side, HDF5Side | CodecSide):
            raise TypeError(f"expected an HDF5Side or CodecSide, got {type(side).__name__}")
        sides.append(side)
    return sides


@functools.cache
def default_registry() -> FilterRegistry:
    """The registry of this process: built-ins and installed plugins, found once."""
    return FilterRegistry.discover()


@functools.cache
def codec_registry() -> FilterRegistry:
    """The codec sides of this process (built-ins and installed plugins), found once: all
    that reading a store's codec JSON needs (``chain.for_array``), without h5py."""
    return FilterRegistry.discover(hdf5=False)


def refresh_registry() -> FilterRegistry:
    """Forget the cached registries and discover plugins again (after installing one)."""
    codec_registry.cache_clear()
    default_registry.cache_clear()
    return default_registry()


def hdf5_to_codec(hdf5_id: int, params: Sequence[int] = ()) -> CodecConfig:
    """Codec JSON for an HDF5 filter id and parameters:
    ``hdf5_to_codec(32015, [5]) == {"id": "zstd", "level": 5}``."""
    return default_registry().hdf5_to_codec(hdf5_id, params)


def codec_to_hdf5(config: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
    """HDF5 filter id and user-form parameters for a codec JSON:
    ``codec_to_hdf5({"id": "zstd", "level": 5}) == (32015, (5,))``."""
    return default_registry().codec_to_hdf5(config)


def pairing_table() -> list[FilterPair]:
    return default_registry().pairs()
