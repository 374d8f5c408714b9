"""Longitude boxes modulo 360 (``accumulation.query.longitude``), against a selection on the grid
repeated five times (labels + 360 k, |k| <= 2), which needs no modular arithmetic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from accumulus.accumulation.query.longitude import (
    is_circular,
    labels,
    longitude_range,
    period,
    pieces,
)
from accumulus.accumulation.query.request import index_range
from accumulus.errors import AccumulusError


def by_repeating(lons: np.ndarray, west: float, east: float) -> list[int]:
    """The indices of the cells in the box, west to east, found on the repeated grid."""
    while east < west:  # across the date line (once or more: -400 is -40)
        east += 360
    east = min(east, west + 360 - 1e-6)  # each cell once
    order = np.argsort(lons)
    repeated = np.concatenate([lons[order] + 360 * k for k in range(-2, 3)])
    cells = np.tile(order, 5)
    return [int(c) for c, x in zip(cells, repeated, strict=True) if west <= x <= east]


def selected(lons: np.ndarray, lo: int, hi: int) -> list[int]:
    return selected_within(lo, hi, lons.size)


def selected_within(lo: int, hi: int, size: int) -> list[int]:
    return [i for a, b in pieces(lo, hi, size) for i in range(a, b)]


@pytest.mark.parametrize("seed", range(40))
def test_boxes_select_what_the_repeated_grid_selects(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    step = 360 / n * (1 if rng.random() < 0.6 else rng.uniform(0.1, 0.9))  # global or not
    start = float(rng.choice([-180, 0, rng.uniform(-300, 300)]))
    lons = start + step * np.arange(n)
    descending = rng.random() < 0.2
    if descending:
        lons = lons[::-1].copy()
    for _ in range(20):
        west, east = (float(x) for x in rng.uniform(-400, 400, 2))
        want = by_repeating(lons, west, east)
        try:
            (lo, hi), _ = longitude_range(lons, west, east)
        except AccumulusError:
            assert want == [], (west, east)
            continue
        got = selected(lons, lo, hi)
        assert sorted(got) == sorted(want), (lons, west, east)
        assert 0 <= lo < n and lo < hi <= lo + n
        if not descending:  # west to east: the labels of the answer keep increasing
            assert (np.diff(labels(lons, lo, hi, west)) > 0).all()


def test_a_box_in_the_other_convention():
    era5 = np.arange(0, 360, 0.25)
    (lo, hi), clipped = longitude_range(era5, -20, 50)
    assert (lo, hi) == (1360, 1440 + 201) and not clipped
    np.testing.assert_array_equal(labels(era5, lo, hi, -20), np.arange(-20, 50.25, 0.25))
    merra2 = np.arange(-180, 180, 0.625)
    (lo, hi), _ = longitude_range(merra2, 170, -170)  # across the date line
    assert pieces(lo, hi, merra2.size) == [(560, 576), (0, 17)]
    np.testing.assert_array_equal(labels(merra2, lo, hi, 170), np.arange(170, 190.625, 0.625))
    assert longitude_range(merra2, 200, 300)[0] == (32, 193)  # -160..-60, no seam crossed


def test_labels_that_differ_by_rounding_are_one_longitude():
    lons = np.round(np.arange(-180, 180, 0.1), 1)
    (lo, hi), _ = longitude_range(lons, 359.9, 0.1)  # -0.1 + 360 need not round to 359.9
    np.testing.assert_allclose(lons[selected(lons, lo, hi)], [-0.1, 0.0, 0.1])
    lons = np.round(np.arange(0, 360, 0.1), 1)
    (lo, hi), _ = longitude_range(lons, -0.1, 0.1)
    np.testing.assert_allclose(lons[selected(lons, lo, hi)], [359.9, 0.0, 0.1])


def test_whole_circle_open_ends_and_nothing():
    lons = np.arange(0, 360, 30.0)
    assert longitude_range(lons, -180, 180) == ((0, 12), False)
    assert longitude_range(lons, None, 50) == ((0, 2), False)
    assert longitude_range(lons, 300, None) == ((10, 12), False)
    with pytest.raises(AccumulusError):
        longitude_range(lons, 31, 59)


def test_a_regional_grid_clips_with_a_note():
    lons = np.arange(60, 101, 10.0)  # cells 55..105
    assert longitude_range(lons, 60, 100) == ((0, 5), False)
    assert longitude_range(lons, 56, 104) == ((0, 5), False)
    assert longitude_range(lons, 50, 70) == ((0, 2), True)
    assert longitude_range(lons, 90 - 360, 120 - 360) == ((3, 5), True)
    # Across the date line from 90 eastward round to 70: the grid's east, then its west.
    assert longitude_range(lons, 90, 70) == ((3, 7), True)  # 90, 100, then 60, 70


def test_which_coordinates_compare_modulo_360():
    assert is_circular(np.arange(0, 360, 0.25))
    assert is_circular(np.arange(180, -180, -1.0))
    assert is_circular(np.arange(0, 361, 1.0))  # repeats its seam: its first 360 columns
    assert not is_circular(np.arange(0, 362, 1.0))  # more than a turn: read as written
    assert not is_circular(np.array([0.0, 10.0, 5.0]))
    assert not is_circular(np.array(["a", "b"]))


def test_a_repeated_seam_column_counts_once():
    """FERRET's -0.5..359.5 (sst.nc), NCAR's 30..390 (sst30e_netcdf.nc), 0..360 and its
    descending form: the last column is the first a turn later, never selected."""
    for lons in (
        np.arange(-0.5, 360, 2.0),
        np.arange(30, 391, 2.0).astype("f4"),
        np.arange(360, -1, -1.0),
        np.linspace(-180, 180, 577),
    ):
        n = lons.size
        assert period(lons) == n - 1
        assert longitude_range(lons, 0, 360) == ((0, n - 1), False)  # the whole circle once
        assert longitude_range(lons, None, None) == ((0, n - 1), False)
        (lo, hi), clipped = longitude_range(lons, -20, 60)
        got = sorted(lons[selected_within(lo, hi, n - 1)] % 360)
        want = sorted(x % 360 for x in lons[: n - 1] if (x + 20) % 360 <= 80)
        np.testing.assert_allclose(got, want)
        assert not clipped
    assert period(np.arange(0, 360, 1.0)) == 360
    assert period(np.arange(0, 362, 1.0)) == 362
    # A turn apart to within 1% of a step: float32 labels are rounded.
    imerg_with_cyclic_point = (-179.95 + 0.1 * np.arange(3601)).astype("f4")
    assert period(imerg_with_cyclic_point) == 3600


def test_float32_labels_of_a_global_grid_are_not_past_anything():
    """IMERG's 0.1° grid stored as float32: its cells cover the globe, so neither a box
    across the date line nor lat=-90/90 reaches past them."""
    lons = np.arange(-179.95, 180, 0.1).astype("f4")
    (lo, hi), clipped = longitude_range(lons, 170, -170)
    assert (lo, hi) == (3500, 3700) and not clipped
    lats = pd.Index(np.arange(-89.95, 90, 0.1).astype("f4"))
    assert index_range(lats, "lat", -90, 90) == ((0, 1800), False)
    assert index_range(lats, "lat", 90, -90) == ((0, 1800), False)
    assert index_range(lats, "lat", -91, 90) == ((0, 1800), True)
    assert index_range(lats[::-1], "lat", 35, -20)[0] == index_range(lats[::-1], "lat", -20, 35)[0]


def test_an_infinite_longitude_is_refused():
    with pytest.raises(AccumulusError, match="'lon' is not a finite longitude"):
        index_range(pd.Index(np.arange(0, 360, 30.0)), "lon", "-inf", 10, circular=True)


def test_a_map_across_a_repeated_seam_column_keeps_its_longitudes(tmp_path):
    """On a 0..360 grid (its last column the first a turn later), lon=350/360 is the
    columns 350..359 and the seam's first, labelled on from 350 (the repeated column's own
    labels): the answer's coordinate, in its DataArray and its JSON, is 350..360."""
    import accumulus
    from accumulus.output import result_json
    from cubes import VAR, synthetic_dataset, write_cube

    ds = synthetic_dataset({"time": 4, "lat": 3, "lon": 361}, seed=2)
    ds = ds.assign_coords(lon=np.arange(0, 361, 1.0))
    ds[VAR][:, :, 360] = ds[VAR][:, :, 0]
    path = tmp_path / "seam.zarr"
    write_cube(ds, path, {"time": 2, "lat": 3, "lon": 90})
    result = accumulus.open(str(path)).query(VAR, "time", {"lon": (350, 360)})
    np.testing.assert_array_equal(result.data["lon"].values, np.arange(350, 361, 1.0))
    assert result_json(result)["coords"]["lon"] == list(np.arange(350, 361, 1.0))
    expected = ds[VAR].isel(lon=[*range(350, 360), 0]).mean("time")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-6)
