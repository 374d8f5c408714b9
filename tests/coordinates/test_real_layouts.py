"""Coordinates as other producers lay them out (issue 34, items 1, 3 and 5), end to end through
the command line on small copies of their files (``tests/data/real_layouts``): ``append``,
``accumulate``, ``average`` series and maps, ``verify`` and ``verify --sources``, every answer
against xarray on the file itself (rtol 1e-9, cos(latitude) in float64), every refusal one
line with exit status 2 and nothing written.

- NCAR's STR SST climatology: dimension ``latitude`` with its latitudes in ``lat(latitude)``,
  longitudes ``lon(longitude)`` 30..390, repeating their first column.
- FERRET's ``sst.nc``: ``LON`` -0.5..359.5, repeating its first column; 4-D ``TEMP``.
- DMI HIRHAM on a rotated pole: ``pr(time, rlat, rlon)`` with 2-D ``lat(rlat, rlon)``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import regionmask
import xarray as xr

from command_line import files, refused, run

DATA = Path(__file__).parents[1] / "data" / "real_layouts"
SST30E = DATA / "sst30e_netcdf_3months.nc"
FERRET = DATA / "sst.nc"
ROTATED = DATA / "small_rotPole_precipitation_window.nc"


# --------------------------------------------------------------------------------------------
# Helpers


def ok(capsys, monkeypatch, *args: str) -> str:
    """stdout of a command that must succeed, with nothing on stderr but progress."""
    code, out, err = run(capsys, monkeypatch, *args)
    assert code == 0, (args, err)
    assert "Traceback" not in err
    return out


def built(capsys, monkeypatch, cube: Path, source: Path, variable: str, *options: str) -> Path:
    """``cube`` appended from ``source`` (``options``: append's) and accumulated with the
    defaults."""
    ok(capsys, monkeypatch, "append", str(cube), str(source), *options)
    ok(capsys, monkeypatch, "accumulate", str(cube), variable)
    return cube


def answer(capsys, monkeypatch, cube: Path, variable: str, *args: str) -> dict:
    """``average --json``'s answer."""
    return json.loads(ok(capsys, monkeypatch, "average", str(cube), variable, *args, "--json"))


def values(found: dict) -> np.ndarray:
    return np.array(found["values"], dtype="f8")


def assert_matches(found: dict, expected) -> None:
    """rtol 1e-9; and near 0, within 1e-12 of the answer's magnitude: a prefix-sum
    difference carries the rounding of the sums it subtracts (a day without rain in a
    time-averaged map is 1e-18 kg m-2 s-1 rather than 0)."""
    expected = np.asarray(expected, dtype="f8")
    scale = float(np.nanmax(np.abs(expected))) if np.isfinite(expected).any() else 0.0
    np.testing.assert_allclose(values(found), expected, rtol=1e-9, atol=1e-12 * scale,
                               equal_nan=True)  # fmt: skip


def cos_lat(latitudes: xr.DataArray) -> xr.DataArray:
    return np.cos(np.deg2rad(latitudes.astype("f8")))


def weighted_mean(data: xr.DataArray, weights: xr.DataArray, over) -> xr.DataArray:
    return data.astype("f8").weighted(weights).mean(over)


def assert_all_ways(capsys, monkeypatch, cube, variable, args, expected) -> None:
    """The answer equals ``expected`` read through the accumulations, the cheaper plan and
    the raw data alone; the accumulations' plan reads accumulation chunks."""
    for how in (["--plan", "accumulation"], [], ["--no-accumulation"]):
        found = answer(capsys, monkeypatch, cube, variable, *args, *how)
        assert_matches(found, expected)
        if how == ["--plan", "accumulation"]:
            assert found["plan"]["accumulation_chunks_read"] > 0, (args, found["plan"])


def modulo_360(data: xr.DataArray, lon: str, west: float, east: float) -> xr.DataArray:
    """xarray's selection of a longitude box modulo 360: longitudes written as how far east
    of ``west`` they are (``(lon - west) % 360``), sorted, those within the box's width (the
    whole circle from 360 on; across the date line when ``west > east``)."""
    width = east - west if west <= east else (east - west) % 360
    moved = data.assign_coords({lon: (data[lon] - west) % 360})
    return moved.sortby(lon).sel({lon: slice(0, min(width, 360))})


def without_repeated_column(data: xr.DataArray, lon: str) -> xr.DataArray:
    """The grid's distinct columns: its last longitude is its first a turn later."""
    assert abs(abs(float(data[lon][-1] - data[lon][0])) - 360) < 1e-6
    return data.isel({lon: slice(0, -1)})


# --------------------------------------------------------------------------------------------
# Item 1: latitudes in lat(latitude)


def sst30e_dataset() -> xr.Dataset:
    """The file as xarray reads it, its lat/lon variables made the coordinates of their
    dimensions (what ``swap_dims`` gives a user who knows the layout)."""
    ds = xr.open_dataset(SST30E).set_coords(["lat", "lon"])
    return ds.swap_dims(latitude="lat", longitude="lon")


def test_latitudes_on_a_differently_named_dimension(capsys, monkeypatch, tmp_path):
    cube = tmp_path / "sst.zarr"
    built(capsys, monkeypatch, cube, SST30E, "sst", "--chunks", "time=1,latitude=20,longitude=50")
    ds = sst30e_dataset()
    sst = without_repeated_column(ds["sst"], "lon")

    # Rows weighted by cos(lat), selected by the value of lat: not by their index.
    selected = sst.sel(lat=slice(-30, 30))
    expected = weighted_mean(selected, cos_lat(selected["lat"]), ["lat", "lon"])
    args = ["--over", "latitude,longitude", "--range", "latitude=-30/30"]
    assert_all_ways(capsys, monkeypatch, cube, "sst", args, expected)
    found = answer(capsys, monkeypatch, cube, "sst", *args)
    assert found["weights"] == "area"
    assert found["selection"]["latitude"] == {
        "kind": "latitude", "first": -30.0, "last": 30.0, "steps": 31
    }  # fmt: skip
    assert "30°S–30°N" in found["titles"]["subtitle"]
    # Numbers either way round, as for any latitude
    assert_matches(
        answer(capsys, monkeypatch, cube, "sst", *args[:2], "--range", "latitude=30/-30"), expected
    )

    # Longitudes modulo 360 on the lon variable, its repeated column (390 = 30) once.
    for west, east in ((-20, 60), (100, 250), (0, 360)):
        box = modulo_360(sst, "lon", west, east)
        expected = weighted_mean(box, cos_lat(box["lat"]), ["lat", "lon"])
        args = ["--over", "latitude,longitude", "--range", f"longitude={west}/{east}"]
        assert_all_ways(capsys, monkeypatch, cube, "sst", args, expected)

    # A time-averaged map: on the grid's latitudes and distinct longitudes.
    found = answer(capsys, monkeypatch, cube, "sst", "--over", "time")
    assert_matches(found, sst.astype("f8").mean("time"))
    np.testing.assert_array_equal(found["coords"]["latitude"], ds["lat"].values)
    np.testing.assert_array_equal(found["coords"]["longitude"], sst["lon"].values)
    # ... and across the seam, west to east.
    found = answer(capsys, monkeypatch, cube, "sst", "--over", "time", "--range",
                   "longitude=-20/60", "--range", "latitude=-10/10")  # fmt: skip
    box = modulo_360(sst, "lon", -20, 60).sel(lat=slice(-10, 10))
    assert_matches(found, box.astype("f8").mean("time"))
    np.testing.assert_allclose(found["coords"]["longitude"], box["lon"] - 20)
    # A zonal mean (weights constant along longitude) and a meridional one (cos lat).
    found = answer(capsys, monkeypatch, cube, "sst", "--over", "latitude", "--range",
                   "latitude=0/60")  # fmt: skip
    selected = sst.sel(lat=slice(0, 60))
    expected = weighted_mean(selected, cos_lat(selected["lat"]), "lat")
    assert_matches(found, expected)

    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "sst")
    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(SST30E))


def test_a_name_that_holds_a_dimensions_labels_is_named_in_the_refusal(
    capsys, monkeypatch, tmp_path
):
    cube = tmp_path / "sst.zarr"
    ok(capsys, monkeypatch, "append", str(cube), str(SST30E))
    before = files(cube)
    message = refused(capsys, monkeypatch, "average", str(cube), "sst", "--over", "lat,lon")
    assert "'lat' holds the latitudes of dimension 'latitude'" in message
    message = refused(capsys, monkeypatch, "average", str(cube), "sst", "--over", "time",
                      "--range", "lat=-30/30")  # fmt: skip
    assert "give 'latitude' instead" in message
    assert files(cube) == before


def test_a_dimension_without_coordinate_values_says_so(capsys, monkeypatch, tmp_path):
    """The same file without its lat variable: rows are positions only. Area weights are
    refused naming what is missing, the default is unweighted and the answer says so, and a
    range selects positions (inclusive, as labels 0..n-1 would), refusing anything else."""
    source = tmp_path / "no_lat.nc"
    xr.open_dataset(SST30E, decode_cf=False).drop_vars("lat").to_netcdf(
        source, format="NETCDF3_CLASSIC"
    )
    cube = tmp_path / "sst.zarr"
    ok(capsys, monkeypatch, "append", str(cube), str(source), "--chunks", "time=1")
    before = files(cube)
    message = refused(capsys, monkeypatch, "accumulate", str(cube), "sst", "--weights", "area")
    assert "weights 'area' need latitudes" in message and "'latitude' has no values" in message
    message = refused(capsys, monkeypatch, "average", str(cube), "sst", "--over",
                      "latitude,longitude", "--range", "latitude=-30/30")  # fmt: skip
    assert "'latitude' has no coordinate values" in message and "positions 0 to 90" in message
    for bad in ("latitude=0.5/3", "latitude=0/91"):
        refused(capsys, monkeypatch, "average", str(cube), "sst", "--over", "time",
                "--range", bad)  # fmt: skip
    assert files(cube) == before

    ok(capsys, monkeypatch, "accumulate", str(cube), "sst")
    rows = xr.open_dataset(source)["sst"].isel(longitude=slice(0, -1))  # lon repeats 30 at 390
    found = answer(capsys, monkeypatch, cube, "sst", "--over", "latitude,longitude",
                   "--range", "latitude=60/90")  # fmt: skip
    expected = rows.isel(latitude=slice(60, 91)).astype("f8").mean(["latitude", "longitude"])
    assert_matches(found, expected)
    assert found["weights"] == "none"
    assert "latitude has no coordinate values: positions 60 to 90 selected" in found["note"]
    assert "unweighted: no variable on the dimensions" in found["note"]


# --------------------------------------------------------------------------------------------
# Item 3: a grid that repeats its seam column


def test_a_grid_repeating_its_seam_column(capsys, monkeypatch, tmp_path):
    cube = tmp_path / "ferret.zarr"
    built(capsys, monkeypatch, cube, FERRET, "TEMP", "--dim", "TIME", "--chunks",
          "TIME=1,LAT=16,LON=40")  # fmt: skip
    temp = xr.open_dataset(FERRET)["TEMP"]
    distinct = without_repeated_column(temp, "LON")

    for west, east in ((-20, 60), (0, 360), (-180, 180), (350, 10), (101.5, 101.5)):
        box = modulo_360(distinct, "LON", west, east)
        expected = weighted_mean(box, cos_lat(box["LAT"]), ["LAT", "LON"])
        args = ["--over", "LAT,LON", "--range", f"LON={west}/{east}"]
        if (west, east) in ((0, 360), (-180, 180)):  # whole chunks: the accumulations answer
            assert_all_ways(capsys, monkeypatch, cube, "TEMP", args, expected)
        found = answer(capsys, monkeypatch, cube, "TEMP", *args)
        assert_matches(found, expected)
        assert "reaches past" not in found["note"]
    # The whole circle counts the repeated column once, ranged or not.
    whole = weighted_mean(distinct, cos_lat(distinct["LAT"]), ["LAT", "LON"])
    found = answer(capsys, monkeypatch, cube, "TEMP", "--over", "LAT,LON")
    assert_matches(found, whole)
    assert "LON: its last longitude (359.5) repeats its first (-0.5), counted once" in found["note"]
    assert found["selection"]["LON"]["steps"] == 180

    # Maps: the distinct columns; across the seam west to east.
    found = answer(capsys, monkeypatch, cube, "TEMP", "--over", "TIME,DEPTH")
    assert_matches(found, distinct.mean(["TIME", "DEPTH"]))
    found = answer(capsys, monkeypatch, cube, "TEMP", "--over", "TIME,DEPTH", "--range",
                   "LON=-20/60")  # fmt: skip
    box = modulo_360(distinct, "LON", -20, 60)
    assert_matches(found, box.mean(["TIME", "DEPTH"]))
    np.testing.assert_allclose(found["coords"]["LON"], box["LON"] - 20)

    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "TEMP")
    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(FERRET))


# --------------------------------------------------------------------------------------------
# Item 5: a curvilinear grid


def test_a_rotated_pole_grid_is_weighted_by_its_2d_latitudes(capsys, monkeypatch, tmp_path):
    cube = tmp_path / "hirham.zarr"
    built(capsys, monkeypatch, cube, ROTATED, "pr", "--chunks", "time=1,rlat=30,rlon=40")
    ds = xr.open_dataset(ROTATED)
    pr, weights = ds["pr"], cos_lat(ds["lat"])

    args = ["--over", "rlat,rlon"]
    found = answer(capsys, monkeypatch, cube, "pr", *args)
    assert found["weights"] == "area"
    assert "area-weighted (cos latitude)" in found["titles"]["subtitle"]
    expected = weighted_mean(pr, weights, ["rlat", "rlon"])
    assert_all_ways(capsys, monkeypatch, cube, "pr", args, expected)
    # The figure: unweighted is percents off.
    unweighted = values(answer(capsys, monkeypatch, cube, "pr", *args, "--weights", "none"))
    assert not np.allclose(unweighted, expected, rtol=1e-3)

    # A box in the rotated coordinates, a Hovmöller diagram and a map.
    box = {"rlat": slice(-5.0, 8.0), "rlon": slice(-10.0, 7.0)}  # whole chunks, and parts
    args = ["--over", "rlat,rlon", "--range", "rlat=-5/8", "--range", "rlon=-10/7"]
    expected = weighted_mean(pr.sel(box), weights.sel(box), ["rlat", "rlon"])
    assert_all_ways(capsys, monkeypatch, cube, "pr", args, expected)
    found = answer(capsys, monkeypatch, cube, "pr", "--over", "rlat")
    assert_matches(found, weighted_mean(pr, weights, "rlat"))
    found = answer(capsys, monkeypatch, cube, "pr", "--over", "time", "--range", "time=1958-01-02/")
    expected = weighted_mean(pr.sel(time=slice("1958-01-02", None)), weights, "time")
    assert_matches(found, expected)

    # A shape: the cells whose 2-D centres it holds, as regionmask finds them.
    alps = regionmask.defined_regions.prudence[["AL"]]
    inside = alps.mask_3D(ds["lon"], ds["lat"]).squeeze("region", drop=True)
    assert 0 < int(inside.sum()) < inside.size
    expected = weighted_mean(pr.where(inside), weights, ["rlat", "rlon"])
    found = answer(capsys, monkeypatch, cube, "pr", "--over", "rlat,rlon", "--region",
                   "prudence:AL")  # fmt: skip
    assert_matches(found, expected)

    message = refused(capsys, monkeypatch, "average", str(cube), "pr", "--over", "time",
                      "--range", "lat=40/50")  # fmt: skip
    assert "'lat' holds 2-D latitudes on ['rlat', 'rlon']" in message

    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "pr")
    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(ROTATED))


def test_cell_measures_give_the_area_weights(capsys, monkeypatch, tmp_path):
    """Where the variable's cell_measures names an area array of the file, that is what
    averages are weighted by (CF 7.2), unless area (cos latitude) is asked for."""
    source = tmp_path / "with_areas.nc"
    shutil.copy(ROTATED, source)
    rng = np.random.default_rng(34)
    with netCDF4.Dataset(source, "a") as nc:
        area = nc.createVariable("cell_area", "f8", ("rlat", "rlon"))
        area.standard_name = "cell_area"
        area.units = "m2"
        area[...] = rng.uniform(0.5e8, 2e8, (100, 100))
        nc["pr"].cell_measures = "area: cell_area"
    cube = tmp_path / "hirham.zarr"
    built(capsys, monkeypatch, cube, source, "pr", "--chunks", "time=1,rlat=30,rlon=40")
    ds = xr.open_dataset(source)
    args = ["--over", "rlat,rlon"]
    expected = weighted_mean(ds["pr"], ds["cell_area"], ["rlat", "rlon"])
    assert_all_ways(capsys, monkeypatch, cube, "pr", args, expected)
    assert answer(capsys, monkeypatch, cube, "pr", *args)["weights"] == "array:cell_area"
    found = answer(capsys, monkeypatch, cube, "pr", *args, "--weights", "area")
    expected = weighted_mean(ds["pr"], cos_lat(ds["lat"]), ["rlat", "rlon"])
    assert_matches(found, expected)


# --------------------------------------------------------------------------------------------
# Virtual cubes of the same layouts


def as_netcdf4(source: Path, target: Path, chunks: dict[str, int]) -> None:
    """``source`` rewritten as NetCDF4 (chunked, compressed), every dimension, variable and
    attribute kept but ``time_bnds(time, time_bnds)``: netCDF-4 stores a variable named
    like a dimension it is not the coordinate of as ``_nc4_non_coord_time_bnds``, which
    virtual cubes do not read back yet (ingest, not coordinates: left to that work)."""
    with netCDF4.Dataset(source) as src, netCDF4.Dataset(target, "w") as out:
        src.set_auto_maskandscale(False)
        out.setncatts({k: src.getncattr(k) for k in src.ncattrs()})
        for name, dim in src.dimensions.items():
            out.createDimension(name, None if dim.isunlimited() else len(dim))
        for name, var in src.variables.items():
            if name in src.dimensions and var.dimensions != (name,):
                continue
            attrs = {k: var.getncattr(k) for k in var.ncattrs()}
            layout = {}
            if var.dimensions:
                sizes = [min(chunks.get(d, len(src.dimensions[d])), var.shape[i]) or 1
                         for i, d in enumerate(var.dimensions)]  # fmt: skip
                layout = {"zlib": True, "chunksizes": sizes}
            new = out.createVariable(
                name, var.dtype, var.dimensions, fill_value=attrs.pop("_FillValue", None), **layout
            )
            new.set_auto_maskandscale(False)
            new.setncatts(attrs)
            new[...] = var[...] if var.dimensions else var.getValue()


VIRTUAL = [
    # file, variable, append dimension, chunks of its NetCDF4 rewrite
    (SST30E, "sst", "time", {"time": 1, "latitude": 20, "longitude": 50}),
    (FERRET, "TEMP", "TIME", {"TIME": 1, "LAT": 16, "LON": 40}),
    (ROTATED, "pr", "time", {"time": 1, "rlat": 30, "rlon": 40}),
]


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
@pytest.mark.parametrize("case", VIRTUAL, ids=[c[1] for c in VIRTUAL])
def test_virtual_cubes_of_the_same_layouts(capsys, monkeypatch, tmp_path, case):
    source, variable, dim, chunks = case
    granule = tmp_path / f"{source.stem}.nc4"
    as_netcdf4(source, granule, chunks)
    refs, side = tmp_path / "refs.json", tmp_path / "side.zarr"
    ok(capsys, monkeypatch, "append", str(refs), str(granule), "--virtual", "--dim", dim)
    ok(capsys, monkeypatch, "accumulate", str(refs), variable, "--into", str(side))
    ds = xr.open_dataset(source)
    if variable == "pr":
        data, weights, over = ds["pr"], cos_lat(ds["lat"]), ["rlat", "rlon"]
        ranges = ["--range", "rlat=-5/5"]
        data, weights = data.sel(rlat=slice(-5, 5)), weights.sel(rlat=slice(-5, 5))
    elif variable == "sst":
        sst = without_repeated_column(sst30e_dataset()["sst"], "lon")
        data = modulo_360(sst, "lon", -20, 60).sel(lat=slice(-30, 30))
        weights, over = cos_lat(data["lat"]), ["lat", "lon"]
        ranges = ["--range", "latitude=-30/30", "--range", "longitude=-20/60"]
    else:
        data = modulo_360(without_repeated_column(ds["TEMP"], "LON"), "LON", -20, 60)
        weights, over = cos_lat(data["LAT"]), ["LAT", "LON"]
        ranges = ["--range", "LON=-20/60"]
    cube_dims = {"lat": "latitude", "lon": "longitude"}
    args = ["--over", ",".join(cube_dims.get(d, d) for d in over), *ranges]
    found = answer(capsys, monkeypatch, refs, variable, *args, "--accumulations", str(side))
    assert_matches(found, weighted_mean(data, weights, over))
    assert "OK" in ok(capsys, monkeypatch, "verify", str(refs), "--sources", str(granule))


# --------------------------------------------------------------------------------------------
# The service: the same labels, kinds and answers


def test_the_service_describes_and_answers_by_the_coordinate_values(capsys, monkeypatch, tmp_path):
    from fastapi.testclient import TestClient

    from accumulus.service import create_app

    cube = tmp_path / "sst.zarr"
    built(capsys, monkeypatch, cube, SST30E, "sst", "--chunks", "time=1,latitude=20,longitude=50")
    client = TestClient(create_app([str(cube)]))
    (described,) = client.get("/api/datasets").json()["datasets"]
    latitude = described["dimensions"]["latitude"]
    assert latitude["kind"] == "latitude" and latitude["units"] == "degrees_north"
    assert (latitude["first"], latitude["last"]) == (-90.0, 90.0)
    assert described["dimensions"]["longitude"]["kind"] == "longitude"
    response = client.get(
        f"/api/datasets/{described['name']}/sst/average?over=latitude,longitude"
        "&latitude=-30/30&longitude=-20/60"
    )
    assert response.status_code == 200, response.text
    box = modulo_360(without_repeated_column(sst30e_dataset()["sst"], "lon"), "lon", -20, 60)
    box = box.sel(lat=slice(-30, 30))
    assert_matches(response.json(), weighted_mean(box, cos_lat(box["lat"]), ["lat", "lon"]))
