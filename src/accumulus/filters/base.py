"""The two halves of a filter, as the NCZarr filter design (seed 004) splits them.

An **HDF5 side** is a filter this process's HDF5 library can apply: an id from the HDF Group
registry and a way to load it (HDF5 itself, h5py, hdf5plugin, or a third-party package).
A **codec side** is what NCZarr's ``NCZ_codec_t`` is: the Zarr codec id (as numcodecs names
it), the HDF5 id it stands for, and the two conversions between HDF5's unsigned-int
parameter vector and the codec's JSON dictionary. A filter is usable only when both halves
are present and available, which is what the registry's pairing table reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accumulus.errors import AccumulusError

CodecConfig = dict[str, Any]


class FilterError(AccumulusError):
    """A filter id, parameter vector or codec JSON that cannot be used, explained in one line."""


@dataclass(frozen=True)
class ArrayLayout:
    """What a filter's "local" parameters are derived from: the array's item type and, when
    known, its shape and chunk shape (HDF5's set_local and netcdf-c's modify_parameters)."""

    dtype: np.dtype
    shape: tuple[int, ...] | None = None
    chunks: tuple[int, ...] | None = None


class HDF5Side(ABC):
    """An HDF5 filter that can be made available to h5py's HDF5 library."""

    hdf5_id: int
    name: str
    provider: str  # the package that supplies the filter, for messages

    @abstractmethod
    def load(self) -> None:
        """Register the filter with HDF5 (import the package that does so). May raise."""

    def availability(self) -> str | None:
        """None when HDF5 can apply this filter here, else the reason why not."""
        try:
            self.load()
        except Exception as exc:  # the plugin package's (ImportError, OSError for its library):
            # a reason, not a crash
            return f"{self.provider} cannot be loaded: {exc}"
        import h5py

        if not h5py.h5z.filter_avail(self.hdf5_id):
            return f"HDF5 filter {self.hdf5_id} is not registered with HDF5 here"
        return None


class CodecSide(ABC):
    """The Zarr codec JSON for one HDF5 filter, and the conversions both ways.

    ``to_codec`` accepts both forms of an HDF5 parameter vector: the *user* form (what a
    program passes to ``H5Pset_filter``/``nc_def_var_filter``) and the *stored* form that a
    filter's ``set_local`` callback writes into the file (often longer: type size, chunk
    bytes). ``to_hdf5`` returns the user form, so ``to_codec(to_hdf5(c)) == c`` for every
    valid codec JSON ``c`` and ``to_hdf5(to_codec(p)) == p`` for every user-form ``p``.
    """

    hdf5_id: int
    codec_id: str
    provider: str = "accumulus"
    # Where the numcodecs codec implementing ``codec_id`` comes from, for "not usable" hints.
    codec_hint: str = "numcodecs provides it"
    # True when chunks written by the HDF5 filter decode with the codec and vice versa, so a
    # peer like netcdf-c (which runs HDF5 filters on Zarr chunks) reads what we write;
    # False when the framing differs; None when it could not be checked (no codec here).
    same_bytes: bool | None = True
    # A user-form parameter vector used to probe whether numcodecs can build the codec.
    example_params: tuple[int, ...] = ()

    @abstractmethod
    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        """Codec JSON for an HDF5 parameter vector (user or stored form)."""

    @abstractmethod
    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """User-form HDF5 parameter vector for a codec JSON dictionary."""

    def for_array(self, config: CodecConfig, layout: ArrayLayout) -> CodecConfig:
        """The codec JSON for an array laid out as ``layout``. Parameters that NCZarr leaves
        to the filter's ``set_local`` (0 or absent = "take it from the variable") are
        resolved here; parameters already given are kept."""
        return config

    def availability(self) -> str | None:
        """None when numcodecs can build this codec here, else the reason why not."""
        import numcodecs

        if self.codec_id not in numcodecs.registry.codec_registry | numcodecs.registry.entries:
            return f"numcodecs has no {self.codec_id!r} codec: {self.codec_hint}"
        try:
            numcodecs.get_codec(self.to_codec(self.example_params))
        except Exception as exc:  # numcodecs' on a codec that fails to load (missing library)
            return f"numcodecs' {self.codec_id!r} codec fails to load ({exc}): {self.codec_hint}"
        return None

    # Helpers for subclasses ------------------------------------------------------------

    def check_params(
        self, params: Sequence[int], allowed_lengths: Iterable[int]
    ) -> tuple[int, ...]:
        values = tuple(params)
        lengths = tuple(allowed_lengths)
        if len(values) not in lengths:
            expected = " or ".join(str(n) for n in lengths)
            raise FilterError(
                f"HDF5 filter {self.hdf5_id} ({self.codec_id}): expected {expected} parameters, "
                f"got {len(values)}: {list(values)}"
            )
        for value in values:
            if not isinstance(value, int | np.integer) or not 0 <= value < 2**32:
                raise FilterError(
                    f"HDF5 filter {self.hdf5_id} ({self.codec_id}): parameters must be unsigned "
                    f"32-bit integers, got {list(values)}"
                )
        return tuple(int(v) for v in values)

    def check_config(self, config: Mapping[str, Any], allowed: Mapping[str, Any]) -> dict[str, Any]:
        """The codec JSON's parameters with defaults filled in (``allowed`` maps each key to
        its default); unknown keys and a wrong ``id`` are errors."""
        if config.get("id") != self.codec_id:
            raise FilterError(f"codec JSON {dict(config)} is not a {self.codec_id!r} codec")
        unknown = sorted(set(config) - set(allowed) - {"id"})
        if unknown:
            raise FilterError(
                f"codec {self.codec_id!r}: unknown key(s) {unknown}; "
                f"expected only {sorted(allowed) or 'no parameters'}"
            )
        return {key: config.get(key, default) for key, default in allowed.items()}

    def check_int(self, key: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise FilterError(f"codec {self.codec_id!r}: {key} must be an integer, got {value!r}")
        if not low <= value <= high:
            raise FilterError(
                f"codec {self.codec_id!r}: {key} must be in [{low}, {high}], got {value}"
            )
        return int(value)
