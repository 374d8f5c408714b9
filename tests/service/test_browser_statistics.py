"""The web page's statistics in Debian's chromium, driven by Playwright: the statistic picker
(var, std, trend, corr with a second variable), a trend map on a colour scale centred on zero,
and a season's series drawn as one bar per year, each checked against the API's answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from service_cubes import dataset
from test_browser import drawn_page, painted_cells

import accumulus
from accumulus.service import create_app
from accumulus.service.server import running

pytestmark = pytest.mark.slow
YEARS = 4


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    """Four years of daily 10° cells warming by 1 K a year, and a second variable (the
    same a day later, plus noise) for correlations; the sums of var, trend and corr built."""
    path = tmp_path_factory.mktemp("statistics-page") / "years.zarr"
    ds = dataset("2001-01-01", 365 * YEARS, 18, 36)
    years = np.arange(ds.sizes["time"]) / 365.25
    ds["tas"] = ds["tas"] + (years[:, None, None]).astype("f4")
    ds["tas"].attrs.update(units="K", long_name="air temperature")
    noise = np.random.default_rng(2).normal(0, 1, ds["tas"].shape).astype("f4")
    ds["tas2"] = ds["tas"].shift(time=-1) + noise
    ds.to_zarr(path, mode="w", consolidated=True,
               encoding={v: {"chunks": (73, 9, 12)} for v in ("tas", "tas2")})  # fmt: skip
    accumulus.accumulate(str(path), "tas", stats=["var", "trend", "corr:tas2"])
    with running(create_app([str(path)])) as base:
        yield base


@pytest.fixture
def page(service: str, tmp_path: Path):
    with drawn_page(service, tmp_path) as tab:
        yield tab


def answer_of(tab, service: str, panel: str) -> dict:
    href = tab.get_attribute(f"#{panel}-cost a.json-link", "href")
    response = httpx.get(service + href)
    assert response.status_code == 200, response.text
    return response.json()


def choose(tab, select: str, value: str, panel: str, wanted: str) -> None:
    """Choose ``value`` and wait until ``panel``'s answer is one asking ``wanted``."""
    tab.select_option(select, value)
    tab.wait_for_function(
        f"document.querySelector('#{panel}-cost a.json-link')?.href.includes({wanted!r})"
    )
    tab.wait_for_selector("body[data-state=drawn]")


def map_cells(answer: dict) -> list:
    lats, lons = answer["coords"]["lat"], answer["coords"]["lon"]
    return [(lat, lon, answer["values"][i][j]) for i, lat in enumerate(lats)
            for j, lon in enumerate(lons)]  # fmt: skip


def test_a_trend_map_is_centred_on_zero(page, service):
    tab = page
    choose(tab, "#stat", "trend", "map", "stat=trend")
    answer = answer_of(tab, service, "map")
    assert answer["stat"] == "trend" and answer["units"] == "(K) per year"
    values = [v for _, _, v in map_cells(answer)]
    assert min(values) > 0.5  # warming everywhere: one sign only
    # Centred on zero all the same: zero is the diverging scale's white, and the most
    # negative colour is as far below as the largest value is above.
    assert tab.evaluate("accumulusPage.colourOf(0)") == [247, 247, 247]
    assert tab.evaluate(f"accumulusPage.colourOf({-max(values)})") == [5, 48, 97]
    for got, expected, _ in painted_cells(tab, "map-canvas", map_cells(answer), "pixelOf",
                                          "colourOf"):  # fmt: skip
        assert got == expected
    assert answer["plan"]["raw_chunks_read"] == 0  # the whole record: the trend's sums
    # The series beside it is the mean (a slope per day has no meaning).
    series = answer_of(tab, service, "series")
    assert series["stat"] == "mean" and series["dims"] == ["time"]


def test_the_picker_asks_var_std_and_corr_with_a_second_variable(page, service):
    tab = page
    assert tab.is_hidden("#with-label")
    choose(tab, "#stat", "var", "map", "stat=var")
    answer = answer_of(tab, service, "map")
    assert answer["stat"] == "var" and answer["units"] == "(K)^2"
    assert tab.inner_text("#map-title") == answer["titles"]["title"]
    choose(tab, "#stat", "std", "series", "stat=std")
    series = answer_of(tab, service, "series")
    assert series["stat"] == "std" and series["dims"] == ["time"]
    points = tab.eval_on_selector_all("#series circle.point",
                                      "cs => cs.map(c => Number(c.dataset.value))")  # fmt: skip
    assert points == [v for v in series["values"] if v is not None]
    choose(tab, "#stat", "corr", "map", "with=tas2")
    assert tab.is_visible("#with-label")
    assert tab.eval_on_selector_all("#with option", "os => os.map(o => o.value)") == ["tas2"]
    answer = answer_of(tab, service, "map")
    assert answer["stat"] == "corr"
    assert "pair sums" in answer["note"] and answer["plan"]["raw_chunks_read"] == 0
    for got, expected, _ in painted_cells(tab, "map-canvas", map_cells(answer), "pixelOf",
                                          "colourOf"):  # fmt: skip
        assert got == expected


def test_a_seasons_series_is_drawn_as_bars_by_year(page, service):
    tab = page
    choose(tab, "#season", "JJA", "series", "season=JJA")
    series = answer_of(tab, service, "series")
    assert series["dims"] == ["year"]
    assert series["coords"]["year"] == [2001 + k for k in range(YEARS)]
    bars = tab.eval_on_selector_all(
        "#series rect.bar",
        "rs => rs.map(r => [Number(r.dataset.year), Number(r.dataset.value),"
        " r.y.baseVal.value, r.height.baseVal.value])",
    )
    assert [b[0] for b in bars] == series["coords"]["year"]
    assert [b[1] for b in bars] == series["values"]
    # Bars stand on one base: the taller the bar, the larger the value (warming by 1 K a
    # year, each summer above the last).
    bottoms = {round(y + h, 3) for _, _, y, h in bars}
    assert len(bottoms) == 1
    heights = [h for *_, h in bars]
    assert heights == sorted(heights) and heights[0] < heights[-1]
    rows = tab.eval_on_selector_all(
        "#series-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [int(r[0]) for r in rows] == series["coords"]["year"]
    # The map is the season's map over all its days.
    answer = answer_of(tab, service, "map")
    assert "season=JJA" in tab.get_attribute("#map-cost a.json-link", "href")
    assert answer["dims"] == ["lat", "lon"]
