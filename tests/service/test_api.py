"""The HTTP API against the library and against xarray, on a small accumulated cube."""

from __future__ import annotations

import csv
import gzip
import io
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_cubes import area_mean
from starlette.responses import PlainTextResponse

from accumulus import api
from accumulus.output import result_json
from accumulus.service import answers, create_app
from accumulus.service.routes import average

# A box and period that cover whole chunks (read from accumulations) and parts of others.
BOX = "time=2001-01-03/2001-02-01&lat=-80/80&lon=-150/150"
SERIES = f"/api/datasets/surface/tas/average?over=lat,lon&{BOX}"
MAP = f"/api/datasets/surface/tas/average?over=time&{BOX}"


def values(body: dict) -> np.ndarray:
    return np.array(body["values"], dtype="f8")  # None -> nan


def test_datasets_describe_dimensions_variables_and_coverage(client, cube_data):
    response = client.get("/api/datasets")
    assert response.status_code == 200
    (surface,) = response.json()["datasets"]
    assert surface["name"] == "surface"
    assert surface["consolidated"] is True
    dims = surface["dimensions"]
    assert dims["time"] == {
        "size": 40,
        "kind": "time",
        "first": "2001-01-01T00:00:00",
        "last": "2001-02-09T00:00:00",
        "ascending": True,
        "units": None,
    }
    assert dims["lat"]["kind"] == "latitude" and dims["lat"]["units"] == "degrees_north"
    assert dims["lat"]["first"] == float(cube_data.lat[0])
    assert dims["lon"]["kind"] == "longitude" and dims["lon"]["last"] == float(cube_data.lon[-1])
    (tas,) = surface["variables"]
    assert tas["dims"] == ["time", "lat", "lon"] and tas["shape"] == [40, 12, 16]
    assert tas["units"] == "K" and tas["long_name"] == "air temperature"
    acc = tas["accumulation"]
    assert acc["complete"] is True and acc["weights"] == "area"
    # The default layout: time alone, latitude and longitude together (each at every cell).
    assert {tuple(c["dims"]) for c in acc["combinations"]} == {("time",), ("lat", "lon")}
    assert acc["coverage"]["time"] == {"covered": 40, "size": 40, "through": "2001-02-09T00:00:00"}
    assert client.get("/api/datasets/surface").json() == surface


def test_series_is_the_cli_json_and_equals_xarray(client, cube, cube_data):
    response = client.get(SERIES)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()

    expected = api.query(
        str(cube),
        "tas",
        "lat,lon",
        {"time": ("2001-01-03", "2001-02-01"), "lat": ("-80", "80"), "lon": ("-150", "150")},
    )
    cli = result_json(expected)
    # Seconds, and (with the core's parallel reads, see the report) bytes and requests,
    # vary from run to run; which chunks are read does not.
    for measured in ("seconds", "bytes_read", "requests"):
        assert body["plan"].pop(measured) > 0
        cli["plan"].pop(measured)
    # The planner's estimates in seconds depend on how the store is read (the service's
    # guard goes through zarr's event loop, a local store is read in the calling thread);
    # which plan they chose does not.
    assert body["plan"].pop("estimated_seconds") > 0
    cli["plan"].pop("estimated_seconds")
    for document in (body, cli):
        for estimate in document["estimates"].values():
            assert estimate.pop("seconds") > 0
    assert body == cli

    truth = area_mean(
        cube_data,
        ["lat", "lon"],
        time=slice("2001-01-03", "2001-02-01"),
        lat=slice(-80, 80),
        lon=slice(-150, 150),
    )
    assert body["dims"] == ["time"]
    assert body["coords"]["time"][0] == "2001-01-03T00:00:00"
    assert len(body["coords"]["time"]) == 30
    np.testing.assert_allclose(values(body), truth.values, rtol=1e-10)
    # The accumulations did the work: whole chunks came from them, raw reads only at edges.
    assert body["plan"]["accumulation_chunks_read"] > 0


def test_map_equals_xarray(client, cube_data):
    body = client.get(MAP).json()
    truth = area_mean(
        cube_data,
        ["time"],
        time=slice("2001-01-03", "2001-02-01"),
        lat=slice(-80, 80),
        lon=slice(-150, 150),
    )
    assert body["dims"] == ["lat", "lon"]
    assert body["coords"]["lat"] == truth.lat.values.tolist()
    assert body["coords"]["lon"] == truth.lon.values.tolist()
    np.testing.assert_allclose(values(body), truth.values, rtol=1e-10)


def test_full_scan_gives_the_same_numbers_without_accumulations(client):
    with_acc = client.get(SERIES).json()
    scan = client.get(SERIES + "&accumulation=false").json()
    assert scan["plan"]["accumulation_chunks_read"] == 0
    assert scan["plan"]["raw_chunks_read"] > with_acc["plan"]["raw_chunks_read"]
    assert scan["note"] == "accumulation not used (full scan requested)"
    np.testing.assert_allclose(values(scan), values(with_acc), rtol=1e-10)


def test_stat_and_weights_are_passed_on(client, cube_data):
    url = "/api/datasets/surface/tas/average?over=lat,lon&time=2001-01-01/2001-01-05"
    counts = client.get(url + "&stat=count&weights=none").json()
    # Valid values per day: 12 x 16 cells, minus the missing one every 7th day.
    expected = cube_data.tas.sel(time=slice("2001-01-01", "2001-01-05")).count(("lat", "lon"))
    assert counts["values"] == expected.values.astype(float).tolist()
    assert counts["weights"] == "none" and counts["stat"] == "count"


def test_ranges_take_partial_dates_and_open_ends(client):
    january = client.get("/api/datasets/surface/tas/average?over=lat,lon&time=2001-01/2001-01")
    assert len(january.json()["coords"]["time"]) == 31
    since = client.get("/api/datasets/surface/tas/average?over=lat,lon&time=2001-02-01/")
    assert since.json()["coords"]["time"][0] == "2001-02-01T00:00:00"
    assert len(since.json()["values"]) == 9
    north = client.get("/api/datasets/surface/tas/average?over=time&lat=+1.5e1/&lon=/-90")
    assert north.json()["coords"]["lat"][0] > 15 and max(north.json()["coords"]["lon"]) < -90


def test_csv_has_the_json_numbers(client):
    body = client.get(MAP).json()
    response = client.get(MAP + "&format=csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == len(body["coords"]["lat"]) * len(body["coords"]["lon"])
    table = {(float(r["lat"]), float(r["lon"])): r["tas"] for r in rows}
    for i, lat in enumerate(body["coords"]["lat"]):
        for j, lon in enumerate(body["coords"]["lon"]):
            assert float(table[(lat, lon)]) == pytest.approx(body["values"][i][j], rel=1e-12)


@pytest.mark.parametrize("url", [SERIES, MAP])
def test_png_draws_series_and_maps(client, url):
    response = client.get(url + "&format=png")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content.startswith(b"\x89PNG\r\n\x1a\n")


BAD_REQUESTS = [
    # (url after /api/datasets/, status, parameter named, words in the message)
    ("nowhere/tas/average?over=time", 404, "dataset", "no dataset 'nowhere'"),
    # Names are looked up, never turned into paths: neither a path nor the store's file name
    # reaches a store.
    ("..%2F..%2Fetc/tas/average?over=time", 404, None, "Not Found"),
    ("surface.zarr/tas/average?over=time", 404, "dataset", "no dataset 'surface.zarr'"),
    ("../tas/average?over=time", 404, None, "Not Found"),
    ("surface/precip/average?over=time", 404, "variable", "no variable 'precip'"),
    ("surface/tas/average", 422, "over", "required"),
    ("surface/tas/average?over=", 422, "over", "at least one dimension"),
    ("surface/tas/average?over=height", 422, "over", "['height']"),
    ("surface/tas/average?over=time&time=2001-13-01/2001-12-31", 422, "time", "not a date"),
    ("surface/tas/average?over=time&time=2001-02-01/2001-01-01", 422, "time", "reversed"),
    ("surface/tas/average?over=time&time=2001-01-01", 422, "time", "start/end"),
    ("surface/tas/average?over=time&lat=north/south", 422, "lat", "start/end"),
    ("surface/tas/average?over=time&time=2001-01-01/10", 422, "time", "start/end"),
    ("surface/tas/average?over=time&lat=95/99", 422, "lat", "selects nothing"),
    ("surface/tas/average?over=time&latitude=0/10", 422, "latitude", "unknown parameter"),
    ("surface/tas/average?over=time&lat=0/10&lat=20/30", 422, "lat", "more than once"),
    ("surface/tas/average?over=time&stat=median", 422, "stat", "unknown stat"),
    ("surface/tas/average?over=time&format=xlsx", 422, "format", "unknown format"),
    ("surface/tas/average?over=time&weights=ocean", 422, "weights", "no array 'ocean'"),
    ("surface/tas/average?over=time&accumulation=perhaps", 422, "accumulation", "boolean"),
    ("surface/tas/average?over=time,lat,lon&format=png", 422, "format", "0 dimensions"),
]


@pytest.mark.parametrize(("path", "status", "parameter", "words"), BAD_REQUESTS)
def test_bad_input_is_a_4xx_naming_the_parameter(client, path, status, parameter, words):
    response = client.get(f"/api/datasets/{path}")
    assert response.headers["content-type"] == "application/json"
    assert response.status_code == status, response.text
    body = response.json()
    assert body["parameter"] == parameter
    assert words in body["error"]


def test_ranges_in_either_order_and_any_longitude_convention(client):
    def answer(ranges: str) -> dict:
        response = client.get(f"/api/datasets/surface/tas/average?over=time,lat,lon&{ranges}")
        assert response.status_code == 200, response.text
        return response.json()

    # lon runs -180..180: 200/300 is -160/-60, and a latitude range may be written north first.
    assert answer("lat=50/-50&lon=200/300")["values"] == answer("lat=-50/50&lon=-160/-60")["values"]
    # A range past the grid is clipped, and the answer says so; the same cells asked for
    # within the grid carry no note, even though the cache holds the first answer.
    clipped, inside = answer("lat=-100/100"), answer("lat=-90/90")
    assert clipped["values"] == inside["values"]
    assert clipped["note"].startswith("lat=-100/100 reaches past the coordinate")
    assert inside["note"] == ""


def test_answers_larger_than_the_cell_limit_are_refused(cube):
    small = TestClient(create_app([str(cube)], max_cells=100))
    response = small.get("/api/datasets/surface/tas/average?over=time")
    assert response.status_code == 422
    body = response.json()
    assert body["parameter"] == "over"
    assert "192 values (12 lat x 16 lon)" in body["error"] and "limit of 100" in body["error"]
    # A box of 10 x 8 cells fits.
    box = small.get("/api/datasets/surface/tas/average?over=time&lat=-60/90&lon=-180/0")
    assert box.status_code == 200
    assert np.array(box.json()["values"]).shape == (10, 8)


def test_unknown_routes_are_json_404s(client):
    response = client.get("/api/nothing")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found", "parameter": None}


def test_health(client):
    body = client.get("/api/health").json()
    assert body["status"] == "ok"
    assert set(body["datasets"]) == {"surface"}


def test_health_reports_the_decoded_chunk_cache(client, monkeypatch):
    """What this process's cache of decoded chunks holds and served (`bench_service_load`
    reads the workers' hit rates from it)."""
    from accumulus.decoded_chunks import DECODED

    for name, value in (("limit", 3 * 2**20), ("_held", 2**20), ("hits", 7), ("misses", 5)):
        monkeypatch.setattr(DECODED, name, value)
    assert client.get("/api/health").json()["decoded_chunks"] == {
        "limit_bytes": 3 * 2**20,
        "held_bytes": 2**20,
        "hits": 7,
        "misses": 5,
        "shared": False,
        "shared_errors": 0,
    }


@pytest.mark.parametrize(
    "path", ["/static/..%2F__init__.py", "/static/%2e%2e/app.py", "/static//etc/passwd"]
)
def test_static_files_stay_in_their_directory(client, path):
    assert client.get(path).status_code == 404


def test_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "<script" in page.text
    for asset in ("/static/app.js", "/static/style.css"):
        assert client.get(asset).status_code == 200
    # Nothing is fetched from elsewhere: the page works offline.
    for text in (page.text, client.get("/static/app.js").text):
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text


def test_openapi_documents_the_ranges_and_errors(client):
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/api/datasets/{dataset}/{variable}/average"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert {"dataset", "variable", "over", "stat", "weights", "format", "accumulation"} <= set(
        parameters
    )
    assert {"time", "lat", "lon"} <= set(parameters)
    assert parameters["dataset"]["schema"]["enum"] == ["surface"]
    stats = ["mean", "sum", "count", "var", "std", "trend", "corr"]
    assert parameters["stat"]["schema"]["enum"] == stats
    assert "with" in parameters
    assert parameters["season"]["schema"]["enum"][:4] == ["DJF", "MAM", "JJA", "SON"]
    assert set(operation["responses"]) == {"200", "404", "422", "503", "504"}
    assert json.dumps(document)  # a valid JSON document


def test_the_short_path_of_a_get_answers_as_the_route_does(cube):
    """GETs of averages are answered by ``FastAverages`` (without FastAPI's routing), with
    the bytes and headers the route gives (a POST without a body goes through the route);
    what its check refuses, and every other request, it passes on to the application."""
    app = create_app([str(cube)], max_cells=10_000)
    passed_on: list[str] = []

    async def application(scope, receive, send):
        passed_on.append(f"{scope['method']} {scope['path']}")
        await PlainTextResponse("passed on", 418)(scope, receive, send)

    short = TestClient(average.FastAverages(application, app.state.service, app.exception_handlers))
    got = short.get(MAP + "&stat=sum")
    posted = TestClient(app).post(MAP + "&stat=sum")
    assert passed_on == []
    assert got.status_code == posted.status_code == 200
    assert got.content == posted.content
    for header in ("content-type", "content-length", "x-accumulus-snapshot"):
        assert got.headers[header] == posted.headers[header]
    assert (got.headers["x-accumulus-cache"], posted.headers["x-accumulus-cache"]) == (
        "miss",
        "hit",
    )
    assert short.get(MAP + "&stat=median").status_code == 418  # the route's error, there
    assert short.post(MAP).status_code == 418
    assert short.get("/api/datasets/surface").status_code == 418
    assert passed_on == [
        "GET " + MAP.split("?")[0],
        "POST " + MAP.split("?")[0],
        "GET /api/datasets/surface",
    ]


def test_large_text_answers_are_gzipped_for_clients_that_accept_it(cube, monkeypatch):
    """A text answer of ``GZIP_MIN_BYTES`` or more is compressed once, kept in the cache
    with it, and sent gzipped to a client whose ``Accept-Encoding`` takes gzip; the others
    get it as it is. A picture is never compressed again. The same answer is the same
    compressed bytes, which the standard library's gzip reads back."""
    monkeypatch.setattr(answers, "GZIP_MIN_BYTES", 1000)
    text = b'{"values": [0.1234, 5.678]}' * 100
    kept = answers.Answer.rendered(text, "application/json").gzipped
    assert kept is not None and gzip.decompress(kept) == text
    assert answers.Answer.rendered(text, "application/json").gzipped == kept
    app = create_app([str(cube)], max_cells=10_000)
    with TestClient(app) as client:
        plain = client.get(MAP, headers={"Accept-Encoding": "identity"})
        gzipped = client.get(MAP, headers={"Accept-Encoding": "br, gzip;q=0.5"})
        refused = client.get(MAP, headers={"Accept-Encoding": "gzip;q=0, br"})
        small = client.get(
            SERIES + "&time=2001-01-01/2001-01-02", headers={"Accept-Encoding": "gzip"}
        )
        picture = client.get(MAP + "&format=png", headers={"Accept-Encoding": "gzip"})
    assert len(plain.content) >= 1000 and "content-encoding" not in plain.headers
    assert plain.headers["vary"] == "Accept-Encoding"
    assert gzipped.headers["content-encoding"] == "gzip"
    assert gzipped.headers["x-accumulus-cache"] == "hit"
    assert int(gzipped.headers["content-length"]) < len(plain.content) / 1.5
    assert gzipped.content == plain.content  # (httpx decompresses)
    assert "content-encoding" not in refused.headers and refused.content == plain.content
    assert "content-encoding" not in small.headers and len(small.content) < 1000
    assert "content-encoding" not in picture.headers and len(picture.content) >= 1000


def test_coordinates_written_at_once_are_those_written_one_by_one():
    """``labels`` writes whole arrays of numbers and times at once: the same JSON values,
    of the same types, as ``label`` value by value (missing numbers as null)."""
    from accumulus.output import label, labels

    arrays = [
        np.linspace(-89.5, 89.5, 7, dtype="f4"),
        np.linspace(-179.5, 179.5, 9),
        np.arange(-3, 4),
        np.arange(5, dtype="u2"),
        np.array([1.5, np.nan, np.inf]),
        np.array(["2001-01-01", "2001-01-02T12:00:00.5"], dtype="datetime64[ns]"),
    ]
    for values in arrays:
        at_once = labels(values)
        one_by_one = [label(v) for v in values]
        assert at_once == one_by_one
        assert [type(v) for v in at_once] == [type(v) for v in one_by_one]


def test_arrays_handed_to_orjson_are_written_as_their_lists():
    """``result_json_bytes`` hands orjson the arrays it writes as their lists would be
    written (coordinates as ``labels``, values as ``_values``): the same bytes either way,
    for every kind of array an answer may hold; the common ones (finite float64 values,
    times in whole seconds) go as arrays."""
    import orjson

    from accumulus.output import _as_written, _values, labels

    numpy = orjson.OPT_SERIALIZE_NUMPY
    coordinates = [
        np.linspace(-89.5, 89.5, 7, dtype="f4"),
        np.linspace(-179.5, 179.5, 9),
        np.linspace(-179.5, 179.5, 9).astype(">f8"),
        np.arange(-3, 4, dtype="i1"),
        np.arange(5, dtype="u2"),
        np.arange(2**40, 2**40 + 3),
        np.array([1.5, np.nan, np.inf]),
        np.array([True, False]),
        np.array(["a", "bc"]),
        np.array(["2001-01-01", "2001-01-02"], dtype="datetime64[ns]"),
        np.array(["2001-01-01", "2001-01-02T12:00:00.5"], dtype="datetime64[ns]"),
        np.array(["2001-01-01", "NaT"], dtype="datetime64[ns]"),
        np.array(["0001-01-01", "9998-12-31T23:59:59"], dtype="datetime64[s]"),
        np.array(["0000-06-01", "2001-01-01"], dtype="datetime64[s]"),
        np.array(["2001-01-01", "9999-12-31"], dtype="datetime64[D]"),
        np.array(["-0100-01-01"], dtype="datetime64[D]"),
    ]
    for values in coordinates:
        handed = _as_written(values, labels)
        assert orjson.dumps(handed, option=numpy) == orjson.dumps(labels(values)), values
    answers = [
        np.array(2.5),
        np.array(np.nan),
        np.array([0.1, -0.0, 5e-324, 1.7976931348623157e308, 1e16, 2.5e-5]),
        np.arange(12.0).reshape(3, 4).T,  # not C-ordered
        np.array([[1.0, np.nan], [np.inf, -np.inf]]),
        np.array([0.1, 1 / 3], dtype="f4"),
        np.arange(6).reshape(2, 3),
    ]
    for values in answers:
        handed = _as_written(values, _values)
        assert orjson.dumps(handed, option=numpy) == orjson.dumps(_values(values)), values
    assert isinstance(_as_written(answers[2], _values), np.ndarray)
    assert isinstance(_as_written(coordinates[9], labels), np.ndarray)


def test_parts_of_a_written_axis_are_its_labels_written():
    """A whole axis' labels written once (``WrittenAxis``), any run of them cut from that
    text, is what orjson writes of those labels' lists (``labels``): for every kind of
    coordinate, labels whose text holds a comma included."""
    import orjson

    from accumulus.output import WrittenAxis, labels

    coordinates = [
        np.linspace(-89.5, 89.5, 7, dtype="f4"),
        np.linspace(-179.5, 179.5, 9),
        np.arange(-3, 4, dtype="i1"),
        np.array([1.5, np.nan, np.inf, -np.inf]),
        np.array(["a", "b,c", "", ",,"]),
        np.array(["2001-01-01", "2001-01-02T12:00:00.5", "NaT"], dtype="datetime64[ns]"),
        np.array(["0001-01-01", "9999-12-31"], dtype="datetime64[D]"),
        np.arange(np.datetime64("2001-01-01"), np.datetime64("2001-03-01")).astype("M8[ns]"),
        np.array([], dtype="f8"),
    ]
    for values in coordinates:
        written = WrittenAxis.of(values)
        n = len(values)
        for start, stop in [(0, n), (0, 1), (1, n), (n // 2, n // 2 + 2), (n - 1, n), (2, 2)]:
            start, stop = min(max(start, 0), n), min(stop, n)
            part = orjson.dumps({"x": written.part(start, stop)})
            assert part == orjson.dumps({"x": labels(values[start:stop])}), (values, start, stop)


# A box and period of ``BOX``, as the library takes them.
BOX_RANGES = {"time": ("2001-01-03", "2001-02-01"), "lat": ("-80", "80"), "lon": ("-150", "150")}


@pytest.mark.parametrize(
    "over, ranges",
    [
        ("lat,lon", BOX_RANGES),
        ("time", BOX_RANGES),
        ("time", {"lon": ("150", "-150")}),  # across the date line: labels past the seam
        ("time", {}),  # whole axes
        ("lat", {"time": ("2001-01-05", "2001-01-20")}),
    ],
)  # fmt: skip
def test_an_answer_is_written_without_its_data_array(cube, over, ranges):
    """JSON is written from an answer's values and labels; its ``DataArray`` is made only
    when asked for, and has those labels and values."""
    import orjson

    from accumulus.output import result_json_bytes

    result = api.query(str(cube), "tas", over, ranges)
    written = orjson.loads(result_json_bytes(result))
    assert "data" not in vars(result)  # not made
    assert written == orjson.loads(orjson.dumps(result_json(result)))
    data = result.data
    assert result.data is data  # made once
    assert data.dims == result.dims and data.name == "tas" and data.attrs == dict(result.attrs)
    assert data.values is result.values
    for d in result.dims:
        labels = result.labels(d)
        assert labels.dtype == data[d].values.dtype
        np.testing.assert_array_equal(labels, data[d].values)
        assert written["coords"][d] == result_json(result)["coords"][d]
