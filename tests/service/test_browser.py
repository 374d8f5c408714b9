"""The web page in Debian's chromium, driven by Playwright: pick a period, drag a box on the
map, switch to the Hovmöller diagrams, and check that what is drawn is what the API answers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import shapely
from playwright.sync_api import Page, sync_playwright
from service_cubes import dataset, write_cube

from accumulus.service import create_app
from accumulus.service.server import running
from tools import tool

# Without the background-networking switches chromium's own connections hang on a closed
# network; a fresh profile keeps runs independent.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Set to a folder (e.g. docs) to keep a screenshot of each mode of the page for the manual.
SCREENSHOTS = os.environ.get("ACCUMULUS_SCREENSHOTS")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("browser")
    surface = write_cube(folder / "surface.zarr", dataset("2001-01-01", 365, 90, 180), (30, 30, 45))
    coarse = write_cube(
        folder / "coarse.zarr", dataset("1990-01-01", 20, 6, 8), (5, 3, 4), zarr_format=2
    )
    with running(create_app([str(surface), str(coarse)])) as base:
        yield base


@contextmanager
def drawn_page(service: str, tmp_path: Path) -> Iterator[Page]:
    """The page of ``service`` in chromium, once it has drawn the whole grid (as on
    arrival); no script error may happen while it is used."""
    chromium = tool("chromium", "apt-get install chromium")  # skips where absent (tests/tools.py)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=chromium,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1400, "height": 900},
        )
        try:
            tab = browser.new_page()
            errors: list[str] = []
            tab.on("pageerror", lambda error: errors.append(str(error)))
            tab.goto(service + "/")
            tab.wait_for_selector("body[data-state=drawn]")
            yield tab
            assert errors == []
        finally:
            browser.close()


@pytest.fixture
def page(service: str, tmp_path: Path):
    with drawn_page(service, tmp_path) as tab:
        yield tab


def drag_box(tab, north: float, west: float, south: float, east: float) -> None:
    start = tab.evaluate(f"accumulusPage.pixelOf({north}, {west})")
    end = tab.evaluate(f"accumulusPage.pixelOf({south}, {east})")
    tab.mouse.move(start["x"], start["y"])
    tab.mouse.down()
    tab.mouse.move((start["x"] + end["x"]) / 2, (start["y"] + end["y"]) / 2)
    tab.mouse.move(end["x"], end["y"])
    tab.mouse.up()


def painted_cells(tab, canvas: str, cells: list, pixel: str, colour: str) -> list:
    """For each cell (a, b, value): the colour painted on ``canvas`` at the cell's centre
    (``accumulusPage[pixel](a, b)``), the colour the page gives the value, and that pixel."""
    return tab.evaluate(
        """([canvasId, cells, pixel, colour]) => {
            const canvas = document.getElementById(canvasId);
            const context = canvas.getContext("2d"), r = canvas.getBoundingClientRect();
            return cells.map(([a, b, v]) => {
                const at = accumulusPage[pixel](a, b);
                const rgb = context.getImageData(at.x - r.left, at.y - r.top, 1, 1).data;
                return [[rgb[0], rgb[1], rgb[2]], accumulusPage[colour](v), at];
            });
        }""",
        [canvas, cells, pixel, colour],
    )


def answer_behind(tab, service: str, panel: str) -> dict:
    """The API's JSON for what a panel shows: its JSON link, fetched by the test."""
    href = tab.get_attribute(f"#{panel}-cost a.json-link", "href")
    response = httpx.get(service + href)
    assert response.status_code == 200
    return response.json()


def test_a_box_and_a_period_draw_the_api_answers(page, service):
    tab = page
    tab.fill("#start", "2001-03-01")
    tab.fill("#end", "2001-08-31")
    # A box wider than a chunk (60° x 90°), so whole chunks come from accumulations.
    drag_box(tab, north=66, west=-100, south=-36, east=24)
    tab.wait_for_selector("body[data-state=drawn]")

    # The drag set the box (to two decimals) and the page asked for that box and period.
    box = {side: float(tab.input_value(f"#{side}")) for side in ("south", "north", "west", "east")}
    assert box == pytest.approx({"south": -36, "north": 66, "west": -100, "east": 24}, abs=0.6)
    series = answer_behind(tab, service, "series")
    expected_query = (
        f"lat={box['south']:g}/{box['north']:g}",
        f"lon={box['west']:g}/{box['east']:g}",
        "time=2001-03-01/2001-08-31",
    )
    href = tab.get_attribute("#series-cost a.json-link", "href")
    assert all(part.replace("/", "%2F") in href for part in expected_query)
    assert series["dims"] == ["time"] and len(series["values"]) == 184  # March to August

    # The time series: one point per day, at the API's time and value, placed on one line
    # of the value axis, and the same numbers in the table.
    points = tab.eval_on_selector_all(
        "#series circle.point",
        "cs => cs.map(c => [c.dataset.time, Number(c.dataset.value), c.cy.baseVal.value])",
    )
    assert [p[0] for p in points] == series["coords"]["time"]
    assert [p[1] for p in points] == series["values"]
    (_, v0, y0), (_, v1, y1) = min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])
    for _, value, y in points:
        assert y == pytest.approx(y0 + (value - v0) * (y1 - y0) / (v1 - v0), abs=0.01)
    rows = tab.eval_on_selector_all(
        "#series-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [r[0] for r in rows] == series["coords"]["time"]
    assert [float(r[1]) for r in rows] == pytest.approx(series["values"], rel=1e-5)

    # The map: every cell of the API's answer is painted in its value's colour, and hovering
    # reads the API's number back.
    answer = answer_behind(tab, service, "map")
    assert answer["dims"] == ["lat", "lon"]
    lats, lons = answer["coords"]["lat"], answer["coords"]["lon"]
    cells = [
        (lat, lon, answer["values"][i][j])
        for i, lat in enumerate(lats)
        for j, lon in enumerate(lons)
    ]
    painted = painted_cells(tab, "map-canvas", cells, "pixelOf", "colourOf")
    assert len(painted) == len(cells) == 51 * 62  # 2° cells in 36 S..66 N, 100 W..24 E
    for got, expected, _ in painted:
        assert got == expected
    for lat, lon, value in cells[:: max(1, len(cells) // 15)]:
        where = tab.evaluate(f"accumulusPage.pixelOf({lat}, {lon})")
        tab.mouse.move(where["x"], where["y"])
        readout = tab.inner_text("#map-readout")
        assert readout.startswith(f"lat {lat:g}, lon {lon:g}: ")
        assert float(readout.split(": ")[1].split()[0]) == pytest.approx(value, rel=1e-5)

    # What each answer cost is shown; the accumulations answered for whole chunks.
    plan = series["plan"]
    assert plan["accumulation_chunks_read"] > 0
    assert f"{plan['accumulation_chunks_read']} accumulation + {plan['raw_chunks_read']} raw" in (
        tab.inner_text("#series-cost")
    )
    # Titles are the API's words; coastlines (from the service) are drawn over the map.
    assert tab.inner_text("#map-title") == answer["titles"]["title"]
    assert tab.inner_text("#map-title") == "Time-averaged map of air temperature (K)"
    assert tab.inner_text("#series-subtitle") == series["titles"]["subtitle"]
    assert "35°S–65°N" in series["titles"]["subtitle"]
    assert tab.evaluate("accumulusPage.coastlines()") > 100
    assert tab.get_attribute("#coast path.coast", "d").startswith("M")
    keep_screenshot(tab, "service.png")


def keep_screenshot(tab, name: str) -> None:
    tab.evaluate("document.activeElement.blur()")
    shot = tab.screenshot(full_page=True)
    assert shot.startswith(b"\x89PNG")
    if SCREENSHOTS:
        (Path(SCREENSHOTS) / name).write_bytes(shot)


@pytest.mark.parametrize("mode", ["hovmoller-latitude", "hovmoller-longitude"])
def test_hovmoller_diagrams_draw_the_api_answers_the_right_way_up(page, service, mode):
    tab = page
    tab.fill("#start", "2001-02-01")
    tab.fill("#end", "2001-05-31")
    drag_box(tab, north=40, west=-60, south=-20, east=30)
    tab.wait_for_selector("body[data-state=drawn]")
    tab.select_option("#mode", mode)
    tab.wait_for_selector(f"body[data-state=drawn][data-mode={mode}]")
    assert tab.is_hidden("#series-panel") and tab.is_visible("#hovmoller-panel")
    answer = answer_behind(tab, service, "hovmoller")
    space = "lat" if mode == "hovmoller-latitude" else "lon"
    assert answer["over"] == (["lon"] if space == "lat" else ["lat"])
    assert sorted(answer["dims"]) == sorted(["time", space])
    times, places = answer["coords"]["time"], answer["coords"][space]
    assert len(times) == 120  # February to May

    def value(t: int, p: int) -> float:
        return answer["values"][t][p] if answer["dims"][0] == "time" else answer["values"][p][t]

    cells = [(t, p, value(t, p)) for t in range(len(times)) for p in range(len(places))]
    painted = painted_cells(tab, "hovmoller-canvas", cells, "hovmollerPixelOf", "hovmollerColourOf")
    for got, expected, _ in painted:
        assert got == expected
    where = {(t, p): at for (t, p, _), (_, _, at) in zip(cells, painted, strict=True)}
    north_or_east = max(range(len(places)), key=lambda p: places[p])
    south_or_west = min(range(len(places)), key=lambda p: places[p])
    if space == "lat":  # time across, north up
        assert where[(0, north_or_east)]["y"] < where[(0, south_or_west)]["y"]
        assert where[(0, 0)]["x"] < where[(len(times) - 1, 0)]["x"]
    else:  # east to the right, time running down
        assert where[(0, north_or_east)]["x"] > where[(0, south_or_west)]["x"]
        assert where[(0, 0)]["y"] < where[(len(times) - 1, 0)]["y"]
    assert tab.inner_text("#hovmoller-title") == answer["titles"]["title"]
    kind = "Longitude" if space == "lat" else "Latitude"
    assert answer["titles"]["title"] == f"{kind}-averaged Hovmöller diagram of air temperature (K)"
    # Hovering reads the API's number back.
    t, p = len(times) // 2, len(places) // 3
    at = where[(t, p)]
    tab.mouse.move(at["x"], at["y"])
    readout = tab.inner_text("#hovmoller-readout")
    assert readout.startswith(f"{times[t]}, {space} {places[p]:g}: ")
    assert float(readout.split(": ")[1].split()[0]) == pytest.approx(value(t, p), rel=1e-5)
    keep_screenshot(tab, f"service-{mode}.png")


def test_a_bad_period_is_shown_next_to_its_inputs(page):
    tab = page
    tab.fill("#start", "2001-09-01")
    tab.fill("#end", "2001-02-01")
    tab.click("#run")
    tab.wait_for_selector("body[data-state=failed]")
    assert "reversed" in tab.inner_text("#message")
    assert tab.get_attribute("#start", "aria-invalid") == "true"
    assert tab.get_attribute("#end", "aria-invalid") == "true"


def test_choosing_another_dataset_draws_it_whole(page, service):
    tab = page
    tab.select_option("#dataset", "coarse")
    tab.wait_for_function("document.querySelectorAll('#series circle.point').length === 20")
    tab.wait_for_selector("body[data-state=drawn]")
    assert tab.input_value("#start") == "1990-01-01" and tab.input_value("#end") == "1990-01-20"
    series = answer_behind(tab, service, "series")
    assert "/api/datasets/coarse/tas/average?" in tab.get_attribute(
        "#series-cost a.json-link", "href"
    )
    values = tab.eval_on_selector_all(
        "#series circle.point", "cs => cs.map(c => Number(c.dataset.value))"
    )
    assert values == series["values"]


def test_a_named_region_and_a_geojson_file_average_within_the_shape(page, service, tmp_path):
    from accumulus.regions import named_region

    tab = page
    tab.fill("#start", "2001-03-01")
    tab.fill("#end", "2001-05-31")
    tab.select_option("#shape-set", "ar6")
    tab.select_option("#shape-region", "WAF")
    tab.wait_for_function(
        "document.querySelector('#series-cost a.json-link')?.href.includes('shape=ar6%3AWAF')"
    )
    tab.wait_for_selector("body[data-state=drawn]")
    series = answer_behind(tab, service, "series")
    assert "Western-Africa (AR6 WAF)" in series["titles"]["subtitle"]
    assert tab.inner_text("#series-subtitle") == series["titles"]["subtitle"]
    values = tab.eval_on_selector_all(
        "#series circle.point", "cs => cs.map(c => Number(c.dataset.value))"
    )
    assert values == series["values"] and len(values) == 92
    assert tab.evaluate("accumulusPage.outline()").startswith("M")
    keep_screenshot(tab, "service-shape.png")

    # The same region as a GeoJSON file of the user's: posted, the same answer.
    path = tmp_path / "waf.geojson"
    path.write_text(shapely.to_geojson(named_region("ar6:WAF").geometry))
    tab.select_option("#shape-set", "file")
    tab.set_input_files("#shape-file", str(path))
    tab.wait_for_function(
        "document.getElementById('series-subtitle').textContent.includes('uploaded GeoJSON')"
    )
    tab.wait_for_selector("body[data-state=drawn]")
    assert tab.eval_on_selector_all("#series-cost a", "links => links.length") == 0  # posted
    posted = tab.eval_on_selector_all(
        "#series circle.point", "cs => cs.map(c => Number(c.dataset.value))"
    )
    assert posted == values


def test_the_region_chosen_last_wins_over_a_slower_answer(page):
    """Choosing a set asks for its first region, choosing a region then asks for that one:
    when the first answer comes back last, the region chosen last stays (it did not, under
    load: the page drew the set's first region and the test above waited for WAF)."""
    tab = page
    tab.evaluate(
        """() => {
          const original = window.fetch;
          window.fetch = (url, ...rest) => {
            const late = String(url).includes("/api/regions/ar6/") && !String(url).endsWith("/WAF");
            return late ? new Promise((r) => setTimeout(r, 1500)).then(() => original(url, ...rest))
              : original(url, ...rest);
          };
        }"""
    )
    tab.select_option("#shape-set", "ar6")
    tab.select_option("#shape-region", "WAF")
    tab.wait_for_function(
        "document.querySelector('#series-cost a.json-link')?.href.includes('shape=ar6%3AWAF')"
    )
    tab.wait_for_timeout(2500)  # the slower answer for the set's first region has come back
    tab.wait_for_selector("body[data-state=drawn]")
    link = tab.get_attribute("#series-cost a.json-link", "href")
    assert "shape=ar6%3AWAF" in link
    assert "WAF" in tab.inner_text("#series-subtitle")
