"""One carrier for a question (``accumulation.query.request.Query``): the command line, the service
and the Python API each parse their own text into the same ``Query``, which alone travels to
the planner; its types name the statistics and plans there are, and a statistic or plan that
does not exist is refused before any store is opened."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args, get_type_hints

import pytest
from fastapi.testclient import TestClient

import accumulus
from accumulus.accumulation.model import statistics
from accumulus.accumulation.query.request import (
    PLANS,
    QUERY_DOC,
    PlanChoice,
    Query,
    QueryOptions,
    ResolvedQuery,
)
from accumulus.datacube import Datacube, DatacubeSnapshot
from accumulus.errors import ParameterError
from accumulus.service import create_app
from command_line import run
from cubes import VAR, synthetic_dataset, write_cube


def test_the_types_name_what_there_is():
    assert get_args(statistics.Stat) == tuple(statistics.STATISTICS)
    assert get_args(PlanChoice) == PLANS == ("cheaper", "accumulation")
    # The Python API's keyword arguments are the query's fields after its question.
    fields = [f.name for f in dataclasses.fields(Query)]
    assert fields[:3] == ["variable", "over", "ranges"]
    assert sorted(get_type_hints(QueryOptions)) == sorted(fields[3:])


@pytest.mark.parametrize(
    ("options", "parameter"),
    [({"stat": "median"}, "stat"), ({"plan": "fastest"}, "plan"), ({"shape": "ar6:NOPE"}, "shape")],
)
def test_a_wrong_option_is_refused_before_the_store_is_opened(tmp_path, options, parameter):
    missing = str(tmp_path / "missing.zarr")
    for ask in (accumulus.query, accumulus.average):
        with pytest.raises(ParameterError) as refused:
            ask(missing, VAR, "lat,lon", **options)
        assert refused.value.parameter == parameter
        assert "missing.zarr" not in str(refused.value)


def test_python_forms_are_parsed_once():
    query = Query.asked(VAR, "lat, lon", None, stat="sum", shape="ar6:SAH")
    assert query.over == ("lat", "lon") and query.ranges == {}
    assert query.shape is not None and query.shape.name == "ar6:SAH"
    assert Query.asked(VAR, ["time"]).stat == "mean"


def test_average_and_query_are_described_once():
    for function in (accumulus.average, accumulus.query, Datacube.average, Datacube.query):
        assert function.__doc__.startswith(QUERY_DOC), function


@pytest.fixture(scope="module")
def cube(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("carrier") / "cube.zarr"
    write_cube(
        synthetic_dataset({"time": 20, "lat": 36, "lon": 48}),
        path,
        {"time": 5, "lat": 12, "lon": 16},
    )
    accumulus.accumulate(str(path), VAR)
    return path


def test_every_front_end_asks_the_same_query(cube, capsys, monkeypatch):
    """The same question from Python, the command line and the service reaches the planner
    (a snapshot's ``query``) as one and the same ``Query``."""
    asked: list[Query] = []
    query = DatacubeSnapshot.query

    def recorded(self, question, memory_bytes):
        asked.append(question.query if isinstance(question, ResolvedQuery) else question)
        return query(self, question, memory_bytes)

    monkeypatch.setattr(DatacubeSnapshot, "query", recorded)
    series = accumulus.average(
        str(cube),
        VAR,
        ["lat", "lon"],
        {"time": ("2001-01-03", "2001-01-12")},
        stat="sum",
        weights="none",
        use_accumulation=False,
        shape="ar6:SAH",
    )
    code, _, err = run(
        capsys, monkeypatch, "average", str(cube), VAR, "--over", "lat,lon",
        "--range", "time=2001-01-03/2001-01-12", "--stat", "sum", "--weights", "none",
        "--no-accumulation", "--region", "ar6:SAH", "--json",
    )  # fmt: skip
    assert code == 0, err
    client = TestClient(create_app([str(cube)]))
    response = client.get(
        f"/api/datasets/cube/{VAR}/average?over=lat,lon&time=2001-01-03/2001-01-12&stat=sum"
        "&weights=none&accumulation=false&shape=ar6:SAH"
    )
    assert response.status_code == 200, response.text
    python, command_line, service = asked
    assert python == command_line == service
    assert python.shape is not None and python.shape.name == "ar6:SAH"
    assert response.json()["values"] == pytest.approx(series.values.tolist())
