"""Bad input: a clear error naming the granule and the problem, and the store unchanged
byte for byte (every file and its checksum compared before and after), or not created."""

from __future__ import annotations

import pytest

import accumulus

from .helpers import VAR, cli, snapshot, truth, write_granule


@pytest.fixture
def cube(tmp_path):
    """A cube of 8 steps with accumulations, and the truth it was cut from (16 steps)."""
    t = truth(16)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 8), chunks={"time": 3})
    accumulus.accumulate(str(store), VAR)
    return store, t


def truncated(path, fraction=0.6):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


def corrupted(path):
    """Overwrite the second half of the file (the compressed chunks) with other bytes."""
    data = bytearray(path.read_bytes())
    half = len(data) // 2
    data[half:] = bytes((b + 77) % 256 for b in data[half:])
    path.write_bytes(bytes(data))
    return path


BAD = {
    "truncated": (
        lambda d, t: truncated(write_granule(d / "bad.nc", t, 8, 12)),
        r"granule .*bad\.nc: cannot read",
    ),
    "corrupt": (
        lambda d, t: corrupted(write_granule(d / "bad.nc", t, 8, 12)),
        r"granule .*bad\.nc: cannot read",
    ),
    "missing-variable": (
        lambda d, t: write_granule(d / "bad.nc", t, 8, 12, variables=("rain",)),
        r"bad\.nc: variable\(s\) \['precip'\] missing",
    ),
    "another-grid": (
        lambda d, t: write_granule(d / "bad.nc", t, 8, 12, lat=t.lat + 0.25),
        r"bad\.nc: another grid: 'lat' differs from the cube's \(first difference at index",
    ),
    "time-backwards": (
        lambda d, t: write_granule(d / "bad.nc", t, 2, 6),
        r"bad\.nc: time 2000-03-01T18:00:00 is not after the end of the cube",
    ),
    "duplicate": (
        lambda d, t: write_granule(d / "bad.nc", t, 7, 10),
        r"bad\.nc: time .* not after the end of the cube .*--skip-existing",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_granule_leaves_the_store_unchanged(cube, tmp_path, case):
    store, t = cube
    make, message = BAD[case]
    good = write_granule(tmp_path / "good.nc", t, 12, 16)
    bad = make(tmp_path, t)
    before = snapshot(store)

    with pytest.raises(accumulus.AccumulusError, match=message):
        accumulus.append(str(store), [good, bad])  # the good one is not appended either

    assert snapshot(store) == before


def test_cli_prints_one_line_and_exits_2(cube, tmp_path):
    store, t = cube
    bad = write_granule(tmp_path / "bad.nc", t, 8, 12, variables=("rain",))
    before = snapshot(store)
    run = cli("append", str(store), str(bad))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith("error: granule ")
    assert "variable(s) ['precip'] missing" in run.stderr
    assert snapshot(store) == before


def test_no_such_granule(cube, tmp_path):
    store, _ = cube
    before = snapshot(store)
    with pytest.raises(accumulus.AccumulusError, match=r"granule .*nope\.nc: no such file"):
        accumulus.append(str(store), tmp_path / "nope.nc")
    assert snapshot(store) == before


def test_wrong_dimension(cube, tmp_path):
    store, t = cube
    before = snapshot(store)
    with pytest.raises(accumulus.AccumulusError, match="is appended along 'time', not 'lat'"):
        accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 8, 12), dim="lat")
    assert snapshot(store) == before


def test_store_whose_directory_does_not_exist(tmp_path):
    t = truth(4)
    store = tmp_path / "missing" / "cube.zarr"
    with pytest.raises(accumulus.AccumulusError, match=r"directory .*missing does not exist"):
        accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 4))
    assert not store.parent.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dim": "level"}, r"a\.nc: no dimension 'level' to append along"),
        ({"chunks": {"level": 2}}, r"--chunks names dimension\(s\) \['level'\]"),
    ],
)
def test_failed_creation_leaves_no_store(tmp_path, options, message):
    t = truth(4)
    store = tmp_path / "cube.zarr"
    with pytest.raises(accumulus.AccumulusError, match=message):
        accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 4), **options)
    assert not store.exists()


def test_bad_first_granule_leaves_no_store(tmp_path):
    t = truth(8)
    store = tmp_path / "cube.zarr"
    good = write_granule(tmp_path / "a.nc", t, 0, 4)
    bad = truncated(write_granule(tmp_path / "b.nc", t, 4, 8))
    with pytest.raises(accumulus.AccumulusError, match=r"b\.nc: cannot read"):
        accumulus.append(str(store), [good, bad])
    assert not store.exists()
