"""``stat="corr", with_=VAR2``: Pearson's r of two variables' valid pairs, as
``xr.corr(a, b, dim=over)``: from the raw chunks of both, and from the pair sums that
``accumulate --stats corr:VAR2`` keeps (prefix sums along time at chunk ends)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.accumulation.model import pairs
from accumulus.errors import AccumulusError
from command_line import run
from cubes import VAR, labels, synthetic_dataset

DIMS = ("time", "lat", "lon")


def _two_variables(sizes, seed, nan_fraction, offset=0.0):
    ds = synthetic_dataset(sizes, seed=seed, nan_fraction=nan_fraction)
    other = synthetic_dataset(sizes, seed=seed + 1, nan_fraction=nan_fraction, var="tas")
    ds["tas"] = other["tas"] + 0.5 * ds[VAR] + np.float32(offset)
    return ds


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.fixed_dictionaries({d: st.integers(1, 8) for d in DIMS}),
    seed=st.integers(0, 2**16),
    nan_fraction=st.sampled_from([0.0, 0.3, 0.8]),
    data=st.data(),
)
def test_corr_equals_xarray(tmp_path_factory, sizes, seed, nan_fraction, data):
    ds = _two_variables(sizes, seed, nan_fraction, offset=280.0)
    chunks = {v: tuple(data.draw(st.integers(1, sizes[d])) for d in DIMS) for v in (VAR, "tas")}
    path = tmp_path_factory.mktemp("corr") / "cube.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True,
               encoding={v: {"chunks": c} for v, c in chunks.items()})  # fmt: skip
    if data.draw(st.booleans()):
        accumulus.accumulate(str(path), VAR, stats=["corr:tas"])
    over = data.draw(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3, unique=True))
    # A range of each dimension (of some only): entries' chunks cut at its edges.
    ranged = data.draw(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3, unique=True))
    spans = {}
    for dim in ranged:
        lo = data.draw(st.integers(0, sizes[dim] - 1))
        spans[dim] = (lo, data.draw(st.integers(lo + 1, sizes[dim])))
    got = accumulus.average(
        str(path), VAR, over, {d: labels(ds, d, *span) for d, span in spans.items()},
        stat="corr", with_="tas",
    )  # fmt: skip
    selected = ds.isel({d: slice(*span) for d, span in spans.items()}).astype("f8")
    want = xr.corr(selected[VAR], selected["tas"], dim=over)
    got = got.transpose(*want.dims)
    np.testing.assert_array_equal(np.isnan(got.values), np.isnan(want.values))
    np.testing.assert_allclose(got.values, want.values, rtol=1e-7, atol=1e-9)


def test_corr_is_asked_for_with_a_second_variable(tmp_path):
    ds = _two_variables({"time": 6, "lat": 3, "lon": 2}, 1, 0.0)
    ds["other_grid"] = (("lat",), np.arange(3.0))
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=2, consolidated=True)
    path = str(tmp_path / "c.zarr")
    with pytest.raises(AccumulusError, match="needs --with VAR2"):
        accumulus.average(path, VAR, ["time"], stat="corr")
    with pytest.raises(AccumulusError, match="needs --with VAR2"):
        accumulus.average(path, VAR, ["time"], with_="tas")
    with pytest.raises(AccumulusError, match="no such data variable"):
        accumulus.average(path, VAR, ["time"], stat="corr", with_="nothing")
    with pytest.raises(AccumulusError, match="differ from"):
        accumulus.average(path, VAR, ["time"], stat="corr", with_="other_grid")


def test_the_accessor_asks_the_statistics(tmp_path):
    ds = _two_variables({"time": 40, "lat": 4, "lon": 3}, 5, 0.2)
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=2, consolidated=True)
    opened = xr.open_zarr(tmp_path / "c.zarr")
    data, other = ds[VAR].astype("f8"), ds["tas"].astype("f8")
    w = np.cos(np.deg2rad(ds["lat"]))
    np.testing.assert_allclose(
        opened[VAR].accumulus.corr("tas").values, xr.corr(data, other, dim="time").values
    )
    np.testing.assert_allclose(
        opened[VAR].accumulus.std("time").values, data.weighted(w).std("time").values
    )
    january = data.where(data.time.dt.month == 1, drop=True).weighted(w).mean(DIMS)
    got = opened[VAR].accumulus.mean(["lat", "lon"], season="JAN")
    np.testing.assert_allclose(got.values, [january.item()])


def _corr(ds: xr.Dataset, time: slice) -> xr.DataArray:
    selected = ds.isel(time=time).astype("f8")
    return xr.corr(selected[VAR], selected["tas"], dim="time")


def test_pair_sums_answer_whole_chunks_without_raw_chunks(tmp_path):
    """``--stats corr:tas``: a map over whole chunks reads two entries and no raw chunk,
    other periods their ends raw; verify recomputes the entries (and finds one changed);
    inspect lists them; an append extends them."""
    ds = _two_variables({"time": 60, "lat": 4, "lon": 5}, 11, 0.2, offset=280.0)
    path = tmp_path / "cube.zarr"
    encoding = {v: {"chunks": (10, 4, 5)} for v in (VAR, "tas")}
    ds.isel(time=slice(0, 40)).to_zarr(path, zarr_format=2, consolidated=True, encoding=encoding)
    built = accumulus.accumulate(str(path), VAR, stats=["corr:tas"])
    assert built.action == "built" and built.pairs == {"tas": "built"}
    [group] = accumulus.inspect(str(path))["accumulation_groups"]
    assert group["pairs"]["tas"]["entries"] == 4 and group["pairs"]["tas"]["final"] == 4
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok and pairs.pairs_path(VAR, "tas") in report.checked, report.problems
    for period, raw in [((10, 30), 0), ((0, 40), 0), ((3, 37), 2 * 2)]:
        got = accumulus.query(
            str(path), VAR, ["time"], {"time": labels(ds, "time", *period)},
            stat="corr", with_="tas",
        )  # fmt: skip
        want = _corr(ds, slice(*period))
        np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9)
        assert got.stats.raw_chunks_read == raw, (period, got.stats)
        assert got.stats.accumulation_chunks_read > 0 and "pair sums" in got.note
    scanned = accumulus.query(
        str(path), VAR, ["time"], stat="corr", with_="tas", use_accumulation=False
    )
    assert scanned.stats.accumulation_chunks_read == 0
    # Appended by xarray: a re-run extends the pair sums from their last entry.
    ds.isel(time=slice(40, 60)).to_zarr(path, append_dim="time")
    extended = accumulus.accumulate(str(path), VAR)
    assert extended.action == "updated" and extended.pairs == {"tas": "updated"}
    got = accumulus.query(str(path), VAR, ["time"], stat="corr", with_="tas")
    np.testing.assert_allclose(got.data.values, _corr(ds, slice(0, 60)).values, rtol=1e-9)
    assert got.stats.raw_chunks_read == 0
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    # An entry changed on disk: verify says which.
    import zarr

    array = zarr.open_group(path, mode="r+")[pairs.pairs_path(VAR, "tas")]
    array[2, 5] = array[2, 5] + 1.0
    [report] = accumulus.verify(str(path), VAR)
    assert any("entry 2" in p and "tas" in p for p in report.problems), report.problems


def test_pair_sums_are_asked_for_by_name(tmp_path):
    ds = _two_variables({"time": 6, "lat": 3, "lon": 2}, 1, 0.0)
    ds["other_grid"] = (("lat",), np.arange(3.0))
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=2, consolidated=True)
    path = str(tmp_path / "c.zarr")
    with pytest.raises(AccumulusError, match="corr needs its second variable: corr:VAR2"):
        accumulus.accumulate(path, VAR, stats=["corr"])
    with pytest.raises(AccumulusError, match="corr:nothing: no such data variable"):
        accumulus.accumulate(path, VAR, stats=["corr:nothing"])
    with pytest.raises(AccumulusError, match=r"corr:other_grid: dimensions .* differ"):
        accumulus.accumulate(path, VAR, stats=["var", "corr:other_grid"])
    assert accumulus.inspect(path)["accumulation_groups"] == []  # nothing written


def test_accumulate_says_what_it_did_to_the_pair_sums(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "c.zarr")
    _two_variables({"time": 6, "lat": 3, "lon": 2}, 1, 0.0).to_zarr(path, zarr_format=2)
    code, out, _ = run(capsys, monkeypatch, "accumulate", path, VAR, "--stats", "corr:tas")
    assert code == 0
    assert "corr pair sums with tas (time at chunk ends): built" in out
    code, out, _ = run(capsys, monkeypatch, "accumulate", path, VAR)
    assert code == 0 and "already up to date" in out


def test_corr_of_one_pair_is_nan(tmp_path):
    # One valid pair has no spread: r is NaN, as xr.corr's, although the difference of two
    # entries of pair sums leaves rounding where the variances are 0.
    ds = _two_variables({"time": 6, "lat": 12, "lon": 12}, 3, 0.0, offset=280.0)
    path = tmp_path / "cube.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True, encoding={VAR: {"chunks": (1, 12, 12)}})
    accumulus.accumulate(str(path), VAR, stats=["corr:tas"])
    for step in range(1, 6):
        got = accumulus.average(
            str(path), VAR, ["time"], {"time": labels(ds, "time", step, step + 1)},
            stat="corr", with_="tas",
        )  # fmt: skip
        assert np.isnan(got.values).all(), step


@pytest.mark.parametrize("seed", range(6))
def test_pair_sums_chunked_across_the_grid_answer_any_box(tmp_path, seed):
    """Pair sums whose entries are cut into chunks along latitude and longitude (a store
    written so): each chunk's part of a box lands at its place, whatever box is asked."""
    import zarr

    ds = _two_variables({"time": 20, "lat": 7, "lon": 9}, seed, 0.2, offset=280.0)
    path = tmp_path / "cube.zarr"
    encoding = {v: {"chunks": (5, 7, 9)} for v in (VAR, "tas")}
    ds.to_zarr(path, zarr_format=2, consolidated=True, encoding=encoding)
    accumulus.accumulate(str(path), VAR, stats=["corr:tas"])
    root = zarr.open_group(path, mode="r+")
    name = pairs.pairs_path(VAR, "tas")
    stored = root[name]
    values, attrs = stored[...], dict(stored.attrs)
    rechunked = root.create_array(
        name, shape=stored.shape, chunks=(1, 8, 3, 4), dtype=stored.dtype,
        fill_value=np.nan, overwrite=True,
    )  # fmt: skip
    rechunked[...] = values
    rechunked.attrs.update(attrs)
    zarr.consolidate_metadata(path)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        spans = {"time": (5 * int(rng.integers(0, 2)), 5 * int(rng.integers(2, 5)))}
        for dim in ("lat", "lon"):
            lo = int(rng.integers(0, ds.sizes[dim]))
            spans[dim] = (lo, int(rng.integers(lo + 1, ds.sizes[dim] + 1)))
        got = accumulus.query(
            str(path), VAR, ["time"], {d: labels(ds, d, *s) for d, s in spans.items()},
            stat="corr", with_="tas",
        )  # fmt: skip
        assert got.stats.raw_chunks_read == 0 and "pair sums" in got.note
        selected = ds.isel({d: slice(*s) for d, s in spans.items()}).astype("f8")
        want = xr.corr(selected[VAR], selected["tas"], dim="time")
        np.testing.assert_array_equal(np.isnan(got.data.values), np.isnan(want.values))
        np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9, atol=1e-12)
