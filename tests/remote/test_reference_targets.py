"""Reference sets read only where they may (issue 35): a set whose chunk names
``/etc/passwd``, ``file:///root/.profile``, ``../../etc/passwd``, ``/proc/self/environ``, a
loopback URL, a FIFO, a socket, a link out of its directory or ``/dev/zero`` is refused in
one line naming the chunk's key, never its target, through the command line and the
service, on JSON and Parquet sets made by ``append --virtual`` and by kerchunk's own writers
(``ZarrToZarr``, ``refs_to_dataframe``), then edited as an attacker would. Storage options
go only to the set's own host, redirects are not followed, and one chunk is bounded by the
query's memory before anything is read."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from fastapi.testclient import TestClient
from fsspec.implementations.reference import LazyReferenceMapper
from kerchunk.df import refs_to_dataframe
from kerchunk.zarr import ZarrToZarr

import accumulus
from accumulus.errors import AccumulusError
from accumulus.service import create_app
from accumulus.service.datasets import dataset_names
from accumulus.service.errors import PublicText
from accumulus.stores import reference_sets
from accumulus.stores.reference_targets import ReferenceRefused, ReferenceTargets
from command_line import refused, run
from servers import http_server

from .granules import VAR, monthly_granules

SECRET = b"accumulus-test-secret: never a value\n"


@dataclass(frozen=True)
class ReferenceSet:
    """A reference set on disk, the variable to average and the key of its first chunk."""

    path: Path
    variable: str
    key: str

    @property
    def parquet(self) -> bool:
        return self.path.suffix == ".parq"

    def with_reference(self, name: str, reference: list) -> Path:
        """A copy beside it (same directory, so the same own location) whose first chunk is
        ``reference``: what an attacker hands over."""
        copy = self.path.with_name(name + self.path.suffix)
        if self.parquet:
            shutil.copytree(self.path, copy)
            mapper = LazyReferenceMapper(str(copy))
            mapper[self.key] = reference
            mapper.flush()
        else:
            document = json.loads(self.path.read_text())
            document["refs"][self.key] = reference
            copy.write_text(json.dumps(document))
        return copy


def virtual_set(folder: Path, suffix: str) -> ReferenceSet:
    """A virtual cube made by accumulus (``append --virtual``) over two monthly granules in
    ``folder/in``: it records them, so it reads only ``folder/in``."""
    granules = monthly_granules(folder / "in", [1, 2])
    out = folder / f"cube{suffix}"
    accumulus.append_virtual(out, granules)
    key = f"{VAR}/0.0.0" if suffix == ".parq" else f"{VAR}/c/0/0/0"
    return ReferenceSet(out, VAR, key)


def kerchunk_set(folder: Path, suffix: str) -> ReferenceSet:
    """A set made by someone else: kerchunk's ``ZarrToZarr`` over a Zarr store written by
    xarray (whole-file references), as JSON or through ``refs_to_dataframe`` as Parquet.
    Its variable's values are its chunk's bytes, so whatever the chunk names comes back as
    values."""
    values = np.frombuffer(SECRET, "u1").reshape(1, 1, -1)
    lon = np.arange(values.shape[2], dtype="f8")
    dataset = xr.Dataset(
        {"secret": (("time", "lat", "lon"), values)},
        coords={"time": [0], "lat": [0.0], "lon": lon},
    )
    store = folder / "hand.zarr"
    dataset.to_zarr(
        store, zarr_format=2, consolidated=False, encoding={"secret": {"compressors": None}}
    )
    refs = ZarrToZarr(str(store)).translate()
    out = folder / f"hand{suffix}"
    if suffix == ".parq":
        refs_to_dataframe(refs, str(out))
    else:
        out.write_text(json.dumps(refs))
    return ReferenceSet(out, "secret", "secret/0.0.0")


MAKERS = {
    "virtual-json": lambda folder: virtual_set(folder, ".json"),
    "virtual-parquet": lambda folder: virtual_set(folder, ".parq"),
    "kerchunk-json": lambda folder: kerchunk_set(folder, ".json"),
    "kerchunk-parquet": lambda folder: kerchunk_set(folder, ".parq"),
}


@pytest.fixture(params=sorted(MAKERS))
def reference_set(request, tmp_path) -> ReferenceSet:
    return MAKERS[request.param](tmp_path)


# Targets that exist everywhere: (reference, what the refusal says)
OUTSIDE = "points outside the locations this set may read"
NEVER = "points into /proc, /dev or /sys, which are never read"
SPECIAL = "cannot be read (not a regular file"
FIXED_TARGETS = {
    "etc-passwd": (["/etc/passwd", 0, 64], OUTSIDE),
    "root-profile": (["file:///root/.profile", 0, 16], OUTSIDE),
    "dot-dot": (["../" * 24 + "etc/passwd", 0, 64], OUTSIDE),
    "proc-environ": (["/proc/self/environ", 0, 64], NEVER),
    "dev-zero": (["/dev/zero"], NEVER),
}


def local_targets(folder: Path) -> dict[str, tuple[list, str, str]]:
    """Hostile files inside the set's own locations (``folder/in``): (reference, what the
    refusal says, what it must not show)."""
    inside = folder / "in"
    inside.mkdir(exist_ok=True)
    fifo = inside / "pipe"
    os.mkfifo(fifo)
    (inside / "to-passwd").symlink_to("/etc/passwd")
    (inside / "to-environ").symlink_to("/proc/self/environ")
    (inside / ".hidden").write_bytes(SECRET)
    cwd = os.getcwd()
    os.chdir(inside)  # a socket's path must be short: bound by a relative name
    try:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind("endpoint")
        listener.close()  # the socket file stays
    finally:
        os.chdir(cwd)
    return {
        "fifo": ([str(fifo), 0, 64], SPECIAL, "pipe"),
        "socket": ([str(inside / "endpoint"), 0, 64], SPECIAL, "endpoint"),
        "link-out": ([str(inside / "to-passwd"), 0, 64], OUTSIDE, "to-passwd"),
        "link-proc": ([str(inside / "to-environ"), 0, 64], NEVER, "to-environ"),
        "hidden": ([str(inside / ".hidden"), 0, len(SECRET)], OUTSIDE, ".hidden"),
    }


def hostile_sets(reference_set: ReferenceSet, secret_url: str) -> dict[str, tuple[Path, str, str]]:
    """Every hostile variant of ``reference_set``: name -> (set, message, hidden text)."""
    folder = reference_set.path.parent
    variants = {
        name: (reference, message, reference[0])
        for name, (reference, message) in FIXED_TARGETS.items()
    }
    variants["loopback-url"] = ([secret_url, 0, len(SECRET)], OUTSIDE, "127.0.0.1")
    variants.update(local_targets(folder))
    # Named by number: a set's own name is in messages, and must not give the target away.
    return {
        name: (reference_set.with_reference(f"hostile-{i}", reference), message, hidden)
        for i, (name, (reference, message, hidden)) in enumerate(variants.items())
    }


@pytest.fixture
def secret_server(tmp_path):
    """A loopback HTTP server with a secret, and the log of what it was asked."""
    served = tmp_path / "secret-server"
    served.mkdir()
    (served / "secret.txt").write_bytes(SECRET)
    with http_server(served) as (url, log):
        yield f"{url}/secret.txt", log


def test_hostile_targets_are_refused_by_the_command_line(
    reference_set, secret_server, capsys, monkeypatch
):
    secret_url, log = secret_server
    for name, (path, message, hidden) in hostile_sets(reference_set, secret_url).items():
        line = refused(
            capsys, monkeypatch, "average", str(path), reference_set.variable, "--over", "time"
        )
        assert f"reference {reference_set.key} {message}" in line, name
        assert hidden not in line and "passwd" not in line and "environ" not in line, name
    assert log.requests == []  # the loopback URL was never asked for


def test_hostile_targets_are_refused_by_the_service(reference_set, secret_server):
    secret_url, log = secret_server
    hostile = hostile_sets(reference_set, secret_url)
    served = [str(path) for path, _, _ in hostile.values()]
    names = {url: name for name, url in dataset_names(served).items()}
    client = TestClient(create_app(served))
    for name, (path, message, hidden) in hostile.items():
        url = f"/api/datasets/{names[str(path)]}/{reference_set.variable}/average?over=time"
        response = client.get(url)
        assert response.status_code == 503, (name, response.text)
        error = response.json()["error"]
        assert f"reference {reference_set.key} {message}" in error, name
        for private in (hidden, str(reference_set.path.parent), "passwd", "environ"):
            assert private not in response.text, (name, private)
    assert log.requests == []


@pytest.mark.parametrize("maker", ["virtual-json", "kerchunk-parquet"])
def test_a_fifo_is_refused_at_once_and_nothing_waits_on_it(tmp_path, maker):
    """Opening a FIFO to read waits for a writer; the reference is refused instead, and no
    thread is left waiting (the watchdog only guards the test against hanging)."""
    reference_set = MAKERS[maker](tmp_path)
    reference, message, _ = local_targets(tmp_path)["fifo"]
    hostile = reference_set.with_reference("fifo", reference)
    failure: list[BaseException] = []

    def average() -> None:
        try:
            accumulus.average(str(hostile), reference_set.variable, "time")
        except BaseException as exc:
            failure.append(exc)

    reader = threading.Thread(target=average, daemon=True)
    reader.start()
    reader.join(120)
    assert not reader.is_alive(), "the read of a FIFO is blocked"
    assert isinstance(failure[0], ReferenceRefused) and message in str(failure[0])


def test_the_sets_read_their_own_chunks(reference_set):
    """The refusals above are the targets', not the sets': each reads its own chunks (a
    kerchunk set's values are its chunk's bytes, what a hostile target would hand out)."""
    values = accumulus.average(str(reference_set.path), reference_set.variable, "time")
    if reference_set.variable == "secret":
        assert values.values.astype("u1").tobytes() == SECRET
    else:
        assert np.isfinite(values.values).any()


@pytest.mark.parametrize("maker", ["virtual-json", "kerchunk-json"])
def test_a_forged_record_widens_nothing(tmp_path, maker):
    """A set that records ``/etc`` as its granules' directory still may not read it."""
    reference_set = MAKERS[maker](tmp_path)
    document = json.loads(reference_set.path.read_text())
    name = "zarr.json" if "zarr.json" in document["refs"] else ".zattrs"
    root = json.loads(document["refs"].get(name, "{}"))
    attributes = root.setdefault("attributes", {}) if name == "zarr.json" else root
    attributes.setdefault("accumulus", {})["virtual"] = {"granules": [{"url": "/etc/passwd"}]}
    document["refs"][name] = json.dumps(root)
    document["refs"][reference_set.key] = ["/etc/passwd", 0, 64]
    forged = reference_set.path.with_name("forged.json")
    forged.write_text(json.dumps(document))
    with pytest.raises(ReferenceRefused, match=OUTSIDE):
        accumulus.average(str(forged), reference_set.variable, "time")


def test_granules_elsewhere_are_read_once_allowed(tmp_path, capsys, monkeypatch):
    """A set whose granules lie outside its own directory reads them only when the reader
    allows their directory (CLI, Python, service); what is allowed then equals xarray."""
    granules = monthly_granules(tmp_path / "archive" / "granules", [1, 2, 3])
    sets = tmp_path / "sets"
    sets.mkdir()
    for suffix in (".json", ".parq"):
        out = sets / f"cube{suffix}"
        accumulus.append_virtual(out, granules)
        line = refused(capsys, monkeypatch, "average", str(out), VAR, "--over", "time")
        assert OUTSIDE in line and "archive" not in line
        allowed = str(tmp_path / "archive")
        code, stdout, err = run(
            capsys, monkeypatch, "average", str(out), VAR, "--over", "time", "--json",
            "--allow-references", allowed,
        )  # fmt: skip
        assert code == 0, err
        with xr.open_mfdataset(granules) as ds:
            expected = ds[VAR].astype("f8").mean("time").values
        printed = np.array(json.loads(stdout)["values"], dtype="f8")
        np.testing.assert_allclose(printed, expected, rtol=1e-9)
        got = accumulus.average(str(out), VAR, "time", allow_references=[allowed])
        np.testing.assert_allclose(got.values, expected, rtol=1e-9)
        client = TestClient(create_app([str(out)], allow_references=[allowed]))
        (name,) = dataset_names([str(out)])
        answer = client.get(f"/api/datasets/{name}/{VAR}/average?over=time")
        assert answer.status_code == 200, answer.text
        # A prefix is a directory: a sibling whose name merely starts the same is not in it.
        with pytest.raises(ReferenceRefused, match=OUTSIDE):
            accumulus.average(str(out), VAR, "time", allow_references=[allowed[:-2]])


def test_append_virtual_says_what_its_readers_must_allow(tmp_path, capsys, monkeypatch):
    granules = monthly_granules(tmp_path / "archive", [1])
    (tmp_path / "sets").mkdir()
    apart = tmp_path / "sets" / "virt.json"
    code, out, err = run(capsys, monkeypatch, "append", str(apart), str(granules[0]), "--virtual")
    archive = os.path.realpath(tmp_path / "archive")
    assert code == 0 and f"--allow-references {archive}/" in out, err
    beside = tmp_path / "virt.json"  # the granules are below its directory: nothing to allow
    code, out, err = run(capsys, monkeypatch, "append", str(beside), str(granules[0]), "--virtual")
    assert code == 0 and "--allow-references" not in out, err


def test_allowing_everything_still_never_reads_the_system_or_special_files(tmp_path):
    reference_set = virtual_set(tmp_path, ".json")
    targets = local_targets(tmp_path)
    for reference, message in [
        (["/proc/self/environ", 0, 64], NEVER),
        (["/dev/zero"], NEVER),
        (targets["fifo"][0], SPECIAL),
        (targets["link-proc"][0], NEVER),
    ]:
        hostile = reference_set.with_reference("everything", reference)
        with pytest.raises(ReferenceRefused, match=message.replace("(", r"\(")):
            accumulus.average(str(hostile), VAR, "time", allow_references=["/"])
        hostile.unlink()


# --------------------------------------------------------------------------------------------
# One chunk is bounded before it is read


def test_a_chunk_larger_than_the_querys_memory_is_refused_before_it_is_read(
    tmp_path, capsys, monkeypatch
):
    """1 x 40000 x 40000 bytes declared (1.6 GB) over a regular file the set may read, or
    over /dev/zero: refused before a byte is read (and before its target is looked at), by
    the command line and the service."""
    reference_set = kerchunk_set(tmp_path, ".json")
    document = json.loads(reference_set.path.read_text())
    zarray = json.loads(document["refs"]["secret/.zarray"])
    zarray["shape"] = zarray["chunks"] = [1, 40000, 40000]
    document["refs"]["secret/.zarray"] = json.dumps(zarray)
    for name, values in [("lat", np.linspace(-89, 89, 40000)), ("lon", np.arange(40000.0))]:
        metadata = json.loads(document["refs"][f"{name}/.zarray"])
        metadata.update(shape=[40000], chunks=[40000], compressor=None)
        document["refs"][f"{name}/.zarray"] = json.dumps(metadata)
        document["refs"][f"{name}/0"] = "base64:" + base64.b64encode(values.tobytes()).decode()
    reads: list[tuple] = []
    real = reference_sets.read_file_range
    monkeypatch.setattr(reference_sets, "read_file_range", lambda *a: reads.append(a) or real(*a))
    sizes = {"regular": [str(tmp_path / "hand.zarr" / "time" / "0"), 0, 40000 * 40000]}
    sizes["dev-zero"] = ["/dev/zero"]
    for name, reference in sizes.items():
        document["refs"][reference_set.key] = reference
        big = tmp_path / f"big-{name}.json"
        big.write_text(json.dumps(document))
        reads.clear()
        over = ("--over", "time,lat,lon")  # one value: the answer is small, the chunk is not
        line = refused(capsys, monkeypatch, "average", str(big), "secret", *over)
        assert "chunk secret/0.0.0 holds 1600000000 bytes decoded" in line
        assert not [r for r in reads if "secret" in r[0] or r[0] == "/dev/zero"]
        client = TestClient(create_app([str(big)]))
        (served,) = dataset_names([str(big)])
        response = client.get(f"/api/datasets/{served}/secret/average?over=time,lat,lon")
        assert response.status_code == 503
        assert "chunk secret/0.0.0 holds 1600000000 bytes" in response.json()["error"]


def test_a_reference_reads_no_more_than_its_chunk_can_hold(tmp_path, monkeypatch):
    """A 37-byte chunk whose reference declares 10**9 bytes, or names a whole file of 1 GiB
    (sparse: no disk used): refused; of the whole file, at most the chunk's bound plus one
    byte is read."""
    reference_set = kerchunk_set(tmp_path, ".json")
    big = tmp_path / "big.bin"
    with big.open("wb") as file:
        file.truncate(2**30)
    reads: list[tuple] = []
    real = reference_sets.read_file_range
    monkeypatch.setattr(reference_sets, "read_file_range", lambda *a: reads.append(a) or real(*a))
    declared = reference_set.with_reference("declared", [str(big), 0, 10**9])
    with pytest.raises(ReferenceRefused, match="reads 1000000000 bytes, more than its chunk"):
        accumulus.average(str(declared), "secret", "time")
    assert not [r for r in reads if r[0] == str(big)]
    whole = reference_set.with_reference("whole", [str(big)])
    with pytest.raises(ReferenceRefused, match="more than its chunk can hold"):
        accumulus.average(str(whole), "secret", "time")
    limit = len(SECRET) + reference_sets.CODEC_SLACK_BYTES
    assert [r for r in reads if r[0] == str(big)] == [(str(big), 0, limit + 1)]


def test_a_zarr_store_declaring_a_huge_chunk_is_refused_before_it_is_read(tmp_path):
    """The same bound holds for any store: a chunk never written (read as its fill value)
    of a declared 1 x 40000 x 40000 would be 1.6 GB allocated."""
    import zarr

    root = zarr.open_group(tmp_path / "huge.zarr", mode="w", zarr_format=2)
    array = root.create_array("v", shape=(1, 40000, 40000), chunks=(1, 40000, 40000), dtype="u1")
    array.attrs["_ARRAY_DIMENSIONS"] = ["t", "y", "x"]
    with pytest.raises(AccumulusError, match=r"chunk v/0\.0\.0 holds 1600000000 bytes decoded"):
        accumulus.average(str(tmp_path / "huge.zarr"), "v", "t,y,x", use_accumulation=False)


# --------------------------------------------------------------------------------------------
# HTTP: credentials only to the set's own host, no redirects, no URLs in error bodies


def test_storage_options_go_only_to_the_sets_own_host(tmp_path, capsys, monkeypatch):
    """A set served by host A, read with an Authorization header: A gets it with every
    request; host B, which the reader allows for one of the set's chunks, never does."""
    granules = monthly_granules(tmp_path / "a", [1, 2])
    (tmp_path / "b").mkdir()
    shutil.copy(granules[1], tmp_path / "b" / granules[1].name)
    with (
        http_server(tmp_path / "a") as (a_url, a_log),
        http_server(tmp_path / "b") as (b_url, b_log),
    ):
        local = tmp_path / "made.json"
        accumulus.append_virtual(local, [f"{a_url}/{g.name}" for g in granules])
        document = json.loads(local.read_text())
        document["refs"][f"{VAR}/c/1/0/0"][0] = f"{b_url}/{granules[1].name}"
        (tmp_path / "a" / "cube.json").write_text(json.dumps(document))
        a_log.clear()
        code, _, err = run(
            capsys, monkeypatch, "average", f"{a_url}/cube.json", VAR, "--over", "time",
            "--storage-option", "headers.Authorization=Bearer only-for-a",
            "--allow-references", f"{b_url}/",
        )  # fmt: skip
        assert code == 0, err
        assert a_log.requests and set(a_log.authorizations) == {"Bearer only-for-a"}
        assert b_log.requests and set(b_log.authorizations) == {None}


def test_redirects_are_not_followed(tmp_path):
    """The set's own host answers a chunk with a redirect to another: refused, and the
    other host is never asked."""
    granules = monthly_granules(tmp_path / "a", [1, 2])
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(granules[0], tmp_path / "elsewhere" / "x.nc")
    with http_server(tmp_path / "elsewhere") as (other, other_log):
        moved = {f"/moved-{granules[0].name}": f"{other}/x.nc"}
        with http_server(tmp_path / "a", redirects=moved) as (url, _):
            local = tmp_path / "made.json"
            accumulus.append_virtual(local, [f"{url}/{g.name}" for g in granules])
            document = json.loads(local.read_text())
            document["refs"][f"{VAR}/c/0/0/0"][0] = f"{url}/moved-{granules[0].name}"
            (tmp_path / "a" / "cube.json").write_text(json.dumps(document))
            with pytest.raises(ReferenceRefused, match="redirected") as error:
                accumulus.average(f"{url}/cube.json", VAR, "time")
            assert "moved" not in str(error.value) and "x.nc" not in str(error.value)
    assert other_log.requests == []


def test_error_bodies_never_show_urls_or_paths():
    public = PublicText([])
    text = public("cannot read s3://internal/bucket/x.nc at http://10.0.0.5:9000/a (/srv/data/x)")
    assert text == "cannot read <url> at <url> (<path>)"


# --------------------------------------------------------------------------------------------
# The allow-list itself


@pytest.mark.parametrize(
    ("allowed", "target", "ok"),
    [
        ("https://data.example/archive/", "https://data.example/archive/a/x.nc", True),
        ("https://data.example/archive/", "https://DATA.example:443/archive/x.nc", True),
        ("https://data.example/archive/", "https://data.example/archive/../secret", False),
        ("https://data.example/archive/", "https://data.example/archive/%2e%2e/secret", False),
        ("https://data.example/archive/", "https://data.example/archive2/x.nc", False),
        ("https://data.example/archive/", "https://data.example:8443/archive/x.nc", False),
        ("https://data.example/archive/", "http://data.example/archive/x.nc", False),
        ("https://data.example/", "https://data.example@127.0.0.1/x.nc", False),
        ("https://data.example/", "simplecache::https://data.example/x.nc", False),
        ("s3://bucket/prefix", "s3://bucket/prefix/key", True),
        ("s3://bucket/prefix", "s3://bucket2/prefix/key", False),
        ("/data/granules", "/data/granules/../other/x.nc", False),
        ("/data/granules", "file:///data/granules/a.nc", True),
        ("/data/granules", "/data/granules-old/a.nc", False),
    ],
)
def test_prefixes_match_whole_components_after_normalizing(allowed, target, ok):
    targets = ReferenceTargets.for_set("/nowhere/set.json", None, [allowed])
    if ok:
        assert targets.resolve("v/0", target)
    else:
        with pytest.raises(ReferenceRefused, match="reference v/0 ") as error:
            targets.resolve("v/0", target)
        assert target not in str(error.value)


@pytest.mark.parametrize(
    ("location", "target", "gets"),
    [
        ("https://a.example/refs.json", "https://a.example/data/x.nc", True),
        ("https://a.example/refs.json", "https://b.example/x.nc", False),
        ("https://a.example/refs.json", "s3://bucket/x.nc", False),
        ("s3://bucket/refs.json", "s3://other-bucket/x.nc", True),
        ("/local/refs.json", "https://b.example/x.nc", True),
    ],
)
def test_storage_options_are_for_the_sets_own_site(location, target, gets):
    targets = ReferenceTargets.for_set(location, None, [target])
    assert targets.gets_options(targets.resolve("v/0", target)) is gets


@pytest.mark.parametrize(
    "reference", [["/x", -1, 10], ["/x", 0, "ten"], ["/x", 0], [3, 0, 1], ["/x", True, 1]]
)
def test_malformed_references_are_refused(tmp_path, reference):
    reference_set = kerchunk_set(tmp_path, ".json")
    hostile = reference_set.with_reference("malformed", reference)
    with pytest.raises(ReferenceRefused, match=r"reference secret/0\.0\.0 "):
        accumulus.average(str(hostile), "secret", "time")
