"""``append icechunk://… GRANULES --virtual``: the granules' chunks as icechunk virtual
references (no data copied), monthly granules of unequal length on a rectilinear grid, the
accumulations as real chunks in the same commit, every commit answering as xarray does on
the granules it held; read by xarray through icechunk's own store. Locally and on S3."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.sync import sync

import accumulus
import icechunk
from accumulus.errors import AccumulusError
from accumulus.stores.opening import open_store
from accumulus.stores.transactional import transaction_of
from ingest.helpers import cli
from remote.granules import VAR, monthly_granules, same_as_granules

NATIVE, VIRTUAL = 1, 2  # icechunk.ChunkType


def granule_means(granules: list[Path], over: list[str]) -> xr.DataArray:
    """xarray's unweighted mean over ``over`` on the granules themselves."""
    with xr.open_mfdataset(granules) as ds:
        return ds[VAR].astype("f8").mean(over).load()


def chunk_kinds(url: str, array: str, ref: str | None = None) -> set[int]:
    store = transaction_of(open_store(url, "r", ref=ref))
    assert store is not None

    async def kinds() -> set[int]:
        found: set[int] = set()
        async for batch in store._store.array_chunk_iterator(f"/{array}"):
            found |= set(batch[1].tolist())
        return found

    return sync(kinds())


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_months_of_unequal_length_referenced_accumulated_and_travelled(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4, 5, 6])
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    first = accumulus.append_virtual(url, granules[:4])
    assert first.created and first.extent == (0, 31 + 28 + 31 + 30) and first.zarr_format == 3
    # No data copied: metadata, coordinates and the references only.
    assert directory_bytes(path) < 0.10 * sum(g.stat().st_size for g in granules[:4])
    assert chunk_kinds(url, VAR) == {VIRTUAL}
    accumulus.accumulate(url, VAR, ["time", "lat,lon"], weights="none")
    second = accumulus.append_virtual(url, granules[3:])  # April again: skipped
    assert second.skipped == ((str(granules[3]), "already referenced"),)
    assert second.extent == (120, 120 + 31 + 30)

    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    log = list(repo.ancestry(branch="main"))[:-1]
    assert [c.message.split(":")[0] for c in log] == [
        "append along time (virtual)",
        f"accumulate {VAR}",
        "append along time (virtual)",
    ]
    assert all(str(g) in log[0].message for g in granules[4:])
    # The accumulations brought up to date in the append's own commit, as real chunks.
    group = f"{VAR}_accumulation_group"
    assert chunk_kinds(url, f"{group}/acc_time") <= {NATIVE, 3}
    assert chunk_kinds(url, VAR) == {VIRTUAL}

    months = {log[0].id: granules, log[1].id: granules[:4], log[2].id: granules[:4]}
    for snapshot, held in months.items():
        reports = accumulus.verify(url, VAR, ref=snapshot)
        assert all(r.ok for r in reports), [r.problems for r in reports]
        for over in (["time"], ["lat", "lon"]):
            got = accumulus.average(url, VAR, over, ref=snapshot, weights="none")
            np.testing.assert_allclose(got.values, granule_means(held, over).values, rtol=1e-9)
    plan = accumulus.open(url).query(VAR, ["time"], weights="none").plan
    assert plan.reads and all(read.source for read in plan.reads)  # accumulations only

    # Any Zarr reader, through icechunk's own store (rectilinear grids switched on).
    prefix = f"file://{(tmp_path / 'in').resolve()}/"
    from icechunk.credentials import LocalFileSystemAccess

    repo = icechunk.Repository.open(
        icechunk.local_filesystem_storage(str(path)),
        authorize_virtual_chunk_access={prefix: LocalFileSystemAccess},
    )
    with zarr.config.set({"array.rectilinear_chunks": True}):
        ds = xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False)
        same_as_granules(ds[[VAR]].load(), granules)


def test_granules_beside_the_repository_only_unless_allowed(tmp_path):
    granules = monthly_granules(tmp_path / "elsewhere" / "in", [1, 2, 3])
    url = f"icechunk://{tmp_path / 'sets' / 'repo'}"
    (tmp_path / "sets").mkdir()
    done = cli("append", url, *map(str, granules[:2]), "--virtual")
    assert done.returncode == 0, done.stderr
    assert f"--allow-references {tmp_path / 'elsewhere' / 'in'}/" in done.stdout
    refused = cli("average", url, VAR, "--over", "time")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"--allow-references {tmp_path / 'elsewhere' / 'in'}/" in refused.stderr
    cube = accumulus.open(url, allow_references=[str(tmp_path / "elsewhere")])
    for held in (granules[:2], granules):
        if len(held) == 3:  # a new commit while the cube is open: still allowed
            accumulus.append_virtual(url, granules[2:])
        got = cube.average(VAR, ["time"], weights="none")
        np.testing.assert_allclose(got.values, granule_means(held, ["time"]).values, rtol=1e-9)


def test_mistakes_are_one_line_and_write_nothing(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2])
    url = f"icechunk://{tmp_path / 'repo'}"
    with pytest.raises(AccumulusError, match="Zarr v3 only"):
        accumulus.append_virtual(url, granules, zarr_format=2)
    accumulus.append_virtual(url, granules[:1])
    copied = cli("append", url, str(granules[1]))
    assert copied.returncode == 2 and "append to it with --virtual" in copied.stderr
    plain = f"icechunk://{tmp_path / 'plain'}"
    accumulus.append(plain, [str(granules[0])])
    with pytest.raises(AccumulusError, match="appended without --virtual"):
        accumulus.append_virtual(plain, granules[1:])
    assert accumulus.open(url).snapshot().cube.decoded[VAR].sizes["time"] == 31


def test_virtual_on_s3(endpoint, bucket, tmp_path):
    """Granules and repository in a bucket: the container is the granules' prefix on S3."""
    import s3fs

    local = monthly_granules(tmp_path / "in", [1, 2, 3])
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
    urls = []
    for granule in local:
        fs.put_file(str(granule), f"{bucket}/granules/{granule.name}")
        urls.append(f"s3://{bucket}/granules/{granule.name}")
    url = f"icechunk+s3://{bucket}/repo"
    options = {"endpoint_url": endpoint}
    accumulus.append_virtual(url, urls[:2], storage_options=options)
    accumulus.accumulate(url, VAR, ["time"], weights="none", storage_options=options)
    accumulus.append_virtual(url, urls[2:], storage_options=options)
    got = accumulus.average(url, VAR, ["time"], weights="none", storage_options=options)
    np.testing.assert_allclose(got.values, granule_means(local, ["time"]).values, rtol=1e-9)
    assert all(r.ok for r in accumulus.verify(url, VAR, storage_options=options))


def test_local_granules_are_read_in_the_thread(tmp_path, icechunk_gets):
    """Once a snapshot's chunk maps are known, a virtual chunk in a local granule is read
    from the granule itself, not through icechunk."""
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    url = f"icechunk://{tmp_path / 'repo'}"
    accumulus.append_virtual(url, granules)
    cube = accumulus.open(url)
    first = cube.average(VAR, ["time"], weights="none")
    icechunk_gets.clear()  # what the second answer asks
    again = cube.average(VAR, ["time"], weights="none")
    assert icechunk_gets == []
    np.testing.assert_array_equal(again.values, first.values)
    np.testing.assert_allclose(first.values, granule_means(granules, ["time"]).values, rtol=1e-9)


def test_an_append_reads_and_writes_the_coordinates_last_chunk_only(
    tmp_path, monkeypatch, icechunk_gets
):
    """What an append reads back of the cube does not grow with its length: the metadata
    documents and the last chunk of the coordinates (here 40 steps long, so that months
    cross chunk edges), never the earlier ones; the coordinates come out whole."""
    from accumulus.ingest import references

    monkeypatch.setattr(references, "_INLINE_CHUNK", 40)
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4, 5, 6])
    url = f"icechunk://{tmp_path / 'repo'}"
    accumulus.append_virtual(url, granules[:1])
    steps = 31
    for granule in granules[1:]:
        icechunk_gets.clear()
        result = accumulus.append_virtual(url, [granule])
        assert result.extent[0] == steps
        last = (steps - 1) // 40  # the chunk of the last step before the append
        asked = {k for k in icechunk_gets if k.startswith(("time/c/", "time_bnds/c/"))}
        assert {k.split("/c/")[1].split("/")[0] for k in asked} == {str(last)}, asked
        steps = result.extent[1]
    from icechunk.credentials import LocalFileSystemAccess

    repo = icechunk.Repository.open(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")),
        authorize_virtual_chunk_access={
            f"file://{(tmp_path / 'in').resolve()}/": LocalFileSystemAccess
        },
    )
    with zarr.config.set({"array.rectilinear_chunks": True}):
        ds = xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False)
        assert ds["time"].encoding["chunks"] == (40,)
        same_as_granules(ds.load(), granules)


def test_virtual_append_onto_a_branch_from_the_command_line(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    accumulus.append_virtual(url, granules[:2])
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    head = repo.lookup_branch("main")
    repo.create_branch("dev", head)
    done = cli("append", url, str(granules[2]), "--virtual", "--ref", "dev")
    assert done.returncode == 0, done.stderr
    assert repo.lookup_branch("main") == head != repo.lookup_branch("dev")
    got = accumulus.average(url, VAR, ["time"], weights="none", ref="dev")
    np.testing.assert_allclose(got.values, granule_means(granules, ["time"]).values, rtol=1e-9)
    wrong = cli("append", url, str(granules[2]), "--virtual", "--ref", head)
    assert wrong.returncode == 2 and f"--ref {head}: not a branch" in wrong.stderr
