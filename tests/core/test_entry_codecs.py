"""How a build compresses positioned accumulation arrays (``placement.bit_shuffled``): counts
and the series' sums of values after a bit shuffle, map-like arrays' sums and the
statistics' optional sums after a byte shuffle. The shuffle only changes the stored bytes:
the same build with every array bit-shuffled (the rule before, session codec50) decodes to
bit-identical entries and answers the same questions with the same bits."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.build import placement
from accumulus.accumulation.model import spec
from cubes import VAR, synthetic_dataset, write_cube

AT = {"time": 1, "lat": 1, "lon": 1}
QUESTIONS = [
    (["time"], {"time": ("2001-01-04", "2001-02-13")}, "mean"),
    (["time"], {"time": ("2001-01-04", "2001-02-13")}, "var"),
    (["time"], {"time": ("2001-01-04", "2001-02-13")}, "trend"),
    (["lat", "lon"], {"time": ("2001-01-04", "2001-02-13"), "lat": (-30, 50)}, "mean"),
    (["lat", "lon"], {"time": ("2001-01-04", "2001-02-13"), "lat": (-30, 50)}, "var"),
]


def _every_bit_shuffled(
    chunks: tuple[int, ...], sums: object, series: bool, itemsize: int, zarr_format: int
) -> bool:
    return prod(chunks) % 8 == 0


def _build(path, sizes) -> None:
    write_cube(synthetic_dataset(sizes, seed=3), path, {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(str(path), VAR, ["time", "lat,lon"], at=AT, stats=["var", "trend"])


def _positioned(path) -> zarr.Group:
    group = path / spec.group_name(VAR) / spec.POSITIONS_GROUP
    return zarr.open_group(group, mode="r")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple:
    """The same cube built with this rule and with every array bit-shuffled."""
    base = tmp_path_factory.mktemp("codecs")
    sizes = {"time": 60, "lat": 12, "lon": 16}
    now, before = base / "now.zarr", base / "before.zarr"
    _build(now, sizes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(placement, "bit_shuffled", _every_bit_shuffled)
        _build(before, sizes)
    return now, before


def test_shuffle_by_array(built):
    now, _ = built
    shuffles = {
        name: array.metadata.filters[0].shuffle for name, array in _positioned(now).arrays()
    }
    byte, bit = 1, 2
    assert shuffles["acc_n_time_at_1"] == bit  # counts
    assert shuffles["acc_n_lat_lon_at_1_1"] == bit
    assert shuffles["acc_uw_lat_lon_at_1_1"] == bit  # a series' sums of values
    assert shuffles["acc_uw_time_at_1"] == byte  # a map's sums of values
    optional = {n: s for n, s in shuffles.items() if n.startswith(("acc_sumsq", "acc_t"))}
    assert {"acc_sumsq_time_at_month", "acc_txsum_lat_lon_at_1_chunk"} <= set(optional)
    assert set(optional.values()) == {byte}  # the statistics' sums, maps and series alike


def test_entries_and_answers_keep_their_bits(built):
    now, before = built
    old = dict(_positioned(before).arrays())
    changed = 0
    for name, array in _positioned(now).arrays():
        assert array[...].tobytes() == old[name][...].tobytes(), name
        changed += array.metadata.filters != old[name].metadata.filters
    assert changed >= 6  # the map's sums and the statistics' sums were stored otherwise
    for over, ranges, stat in QUESTIONS:
        got = accumulus.query(str(now), VAR, over, ranges, stat=stat)
        expected = accumulus.query(str(before), VAR, over, ranges, stat=stat)
        assert got.stats.accumulation_chunks_read > 0
        assert got.data.values.tobytes() == expected.data.values.tobytes(), (over, stat)
        assert np.isfinite(got.data.values).any()
