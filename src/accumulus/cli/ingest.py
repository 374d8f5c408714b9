"""Making cubes: ``append`` (granules, copied or referenced), ``convert`` (one NetCDF4/HDF5
or NetCDF-3 file), ``rechunk`` (a copy with other chunks), and ``filters`` (which HDF5
filters convert and append can keep, as Zarr codecs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer

from accumulus.cli.console import ProgressBar, console, err_console, size_text
from accumulus.cli.entry import load_api
from accumulus.cli.options import (
    AllowReferences,
    EndpointUrl,
    Scheduler,
    StorageOption,
    dimension_sizes,
    group_option,
    option,
    reading,
)
from accumulus.errors import AccumulusError, Interrupted


def append(
    store: Annotated[str, typer.Argument(help="Cube path or URL (dir, file://, s3://).")],
    granules: Annotated[
        list[str], typer.Argument(help="NetCDF4/HDF5 files or Zarr stores, in any order.")
    ],
    dim: Annotated[str, option("--dim", "The dimension to append along.")] = "time",
    chunks: Annotated[
        list[str] | None,
        option(
            "--chunks",
            "When the cube is created: dim=size,... e.g. time=40 (default: ~100 MiB chunks).",
        ),
    ] = None,
    chunking: Annotated[
        str | None,
        option(
            "--chunking",
            "When the cube is created, along --dim: month or year (a chunk per calendar "
            "period), per-granule (each granule a chunk), grow (chunks that grow with the cube to "
            "their size), or a size. Variable chunks need Zarr v3.",
        ),
    ] = None,
    shards: Annotated[
        list[str] | None,
        option(
            "--shards",
            "When the cube is created (Zarr v3): data chunks packed in shards of dim=size,... "
            "e.g. time=365 (multiples of the chunks; one chunk per shard along other dimensions).",
        ),
    ] = None,
    skip_existing: Annotated[
        bool,
        option("--skip-existing", "Skip steps already in the cube instead of refusing."),
    ] = False,
    zarr_format: Annotated[
        int | None,
        option(
            "--zarr-format",
            "When the cube is created: 2 or 3 (default 2; 3 with a named --chunking or --shards).",
        ),
    ] = None,
    group: Annotated[
        str | None,
        group_option(
            "Group of the granules to append (with its nested groups), kept at the same place "
            "in the cube; default: the one group holding variables along --dim."
        ),
    ] = None,
    endpoint_url: EndpointUrl = None,
    storage_option: StorageOption = None,
    virtual: Annotated[
        bool,
        option(
            "--virtual",
            "Write references to the granules' chunks, no data copied: a .json reference "
            "file, or a .parq Parquet reference set (for large archives).",
        ),
    ] = False,
    allow_references: AllowReferences = None,
    ref: Annotated[
        str | None,
        option(
            "--ref",
            "Of an icechunk repository (icechunk://, icechunk+s3://): the branch to commit "
            "to (default: main).",
        ),
    ] = None,
) -> None:
    """Create a cube from granules, or append them to it. Safe to re-run, safe to kill."""
    api = load_api()

    source = reading(endpoint_url, storage_option, allow_references, ref)
    options = source["storage_options"]
    if virtual:
        if chunks or chunking or shards:
            raise AccumulusError(
                "--virtual keeps the granules' own chunks; --chunks, --chunking and --shards "
                "do not apply"
            )
        allowed = source["allow_references"] or ()
        _append_virtual(
            store, granules, dim, zarr_format, skip_existing, options, group, allowed, ref
        )
        return
    sizes = dimension_sizes(chunks, "--chunks")
    shard_sizes = dimension_sizes(shards, "--shards")
    with ProgressBar("appending", count=granules_counted) as report:
        result = api.append(
            store,
            granules,
            dim=dim,
            chunks=sizes or None,
            chunking=chunking,
            skip_existing=skip_existing,
            zarr_format=zarr_format,
            progress=report,
            group=group,
            shards=shard_sizes or None,
            **source,
        )
    if result.recovered:
        console.print(f"[yellow]recovered:[/] {result.recovered}", highlight=False)
    if result.chunking is not None:
        console.print(f"created {result.store}: {result.chunking.reason}", highlight=False)
        cube = api.open_cube(store, "r", options, group=group)
        if any(_is_variable(a.metadata.chunk_grid) for _, a in cube.root.arrays()):
            _say_how_xarray_reads(result.store)
    if not _appended_any(result, dim):
        return
    before, after = result.extent
    updated = (
        f"; accumulations updated for {', '.join(result.accumulations)}"
        if result.accumulations
        else ""
    )
    # An icechunk repository commits once: the snapshot readers can pin (--ref).
    commits = f"commit {result.snapshot}" if result.snapshot else f"{result.commits} commit(s)"
    console.print(
        f"appended {len(result.appended)} granule(s): {dim} {before} → {after} steps in "
        f"{commits}, {result.seconds:.1f} s{updated}",
        highlight=False,
    )


def granules_counted(done: int, total: int) -> str:
    """An append's progress in granules: it counts two steps for each, checked (every value
    read and converted) then written (a granule skipped counts as written)."""
    n = total // 2
    if done <= n:
        return f"{done}/{n} granules checked"
    return f"{n}/{n} checked, {done - n}/{n} written or skipped"


def _appended_any(result: Any, dim: str) -> bool:
    """Whether an append appended any granule; the granules it skipped are listed, and an
    append of none says so."""
    for name, why in result.skipped:
        console.print(f"[dim]skipped {name}: {why}[/]", highlight=False)
    if not result.appended:
        console.print(f"nothing to append; {dim} has {result.extent[1]} steps", highlight=False)
    return bool(result.appended)


def _append_virtual(
    out: str,
    granules: list[str],
    dim: str,
    zarr_format: int | None,
    skip_existing: bool,
    options: dict | None,
    group: str | None,
    allowed: Sequence[str] = (),
    ref: str | None = None,
) -> None:
    from accumulus.destinations import check_file, check_store
    from accumulus.ingest.virtual import LARGE_JSON_SET, append_virtual
    from accumulus.stores.locations import local_path
    from accumulus.stores.reference_sets import is_parquet_references
    from accumulus.stores.reference_targets import directories_to_allow
    from accumulus.stores.transactional import directories_to_allow as repository_directories
    from accumulus.stores.transactional import is_repository_url

    if local_path(out) is not None:  # before any granule is read
        check = check_store if is_parquet_references(out) else check_file
        check(out, "the reference set")
    try:
        result = append_virtual(
            out,
            granules,
            dim,
            zarr_format=zarr_format,
            skip_existing=skip_existing,
            storage_options=options,
            group=group,
            ref=ref,
            allow_references=allowed,
        )
    except KeyboardInterrupt:
        raise Interrupted(
            f"{out} is unchanged (a reference set is replaced in one write, and a repository "
            "commits once, after every granule is read); run the same command again"
        ) from None
    if not _appended_any(result, dim):
        return
    before, after = result.extent
    console.print(
        f"{'created' if result.created else 'extended'} {out} (virtual, Zarr "
        f"v{result.zarr_format}): {len(result.appended)} granule(s) referenced, {dim} "
        f"{before} → {after} steps in {result.seconds:.1f} s; "
        + _granule_reads(result.bytes_read, result.granule_bytes),
        highlight=False,
    )
    if is_repository_url(out):  # it reads the containers beside it, or those allowed
        outside = repository_directories(out, result.appended)
    else:
        outside = directories_to_allow(out, result.appended)
    if outside:
        console.print(
            f"[dim]{out} reads granules outside its own directory only where its readers "
            f"allow them: --allow-references {' --allow-references '.join(outside)}[/]",
            highlight=False,
            soft_wrap=True,  # a command to copy, on one line
        )
    if out.endswith(".json") and result.references > LARGE_JSON_SET:
        console.print(
            f"[dim]{out} holds {result.references:,} chunk references, which every reader "
            "parses to open it; a Parquet reference set opens lazily at any size: "
            f"accumulus append {out.removesuffix('.json')}.parq GRANULES --virtual[/]",
            highlight=False,
        )


def _granule_reads(read: int, total: int) -> str:
    """What referencing granules read, against their size. The bytes read are those h5py
    asked for, some of them more than once (a header's blocks): for small granules that is
    more than their size, which is said as such rather than as a share above 100 %."""
    if total and read <= total:
        return f"read {size_text(read)} of their {size_text(total)} ({read / total:.1%})"
    times = f"{read / total:.1f}x " if total else ""
    return (
        f"read {size_text(read)}, {times}their {size_text(total)} (h5py reads parts of small "
        "granules, headers and chunk indexes, more than once)"
    )


def filters(
    as_json: Annotated[bool, option("--json", "Print the table as JSON.")] = False,
) -> None:
    """The HDF5 filter ↔ Zarr codec pairing table: which filters are usable here, and why not."""
    import json

    from accumulus.filters import default_registry

    registry = default_registry()
    rows = registry.pairs()
    if as_json:
        document = {"filters": [row.to_dict() for row in rows], "problems": registry.problems}
        console.print_json(json.dumps(document))
        return
    line = "{:>6}  {:<12} {:<16} {:<11} {:<15} {:<10} {}"
    console.print(
        line.format("id", "filter", "codec", "HDF5 side", "codec side", "same bytes", "usable"),
        style="bold",
        highlight=False,
    )
    for row in rows:
        same_bytes = {True: "yes", False: "no", None: "-"}[row.same_bytes]
        hdf5_side = _side_text(row.hdf5_provider, row.hdf5_problem)
        codec_side = _side_text(row.codec_provider, row.codec_problem)
        usable = "yes" if row.usable else "no"
        text = line.format(
            row.hdf5_id, row.name, row.codec_id or "-", hdf5_side, codec_side, same_bytes, usable
        )
        console.print(text, highlight=False)
    console.print()
    for row in rows:
        if not row.usable:
            console.print(f"{row.hdf5_id} {row.name}: {row.reason}", highlight=False)
    for problem in registry.problems:
        err_console.print(f"[yellow]plugin not loaded:[/] {problem}", highlight=False)


def _side_text(provider: str | None, problem: str | None) -> str:
    if provider is None:
        return "missing"
    return provider if problem is None else f"{provider} (no)"  # the reason is printed below


def convert(
    src: Annotated[str, typer.Argument(help="NetCDF4/HDF5 or NetCDF-3 file.")],
    dest: Annotated[str, typer.Argument(help="Zarr directory to create (must not exist).")],
    zarr_format: Annotated[int, option("--zarr-format", "2 (default) or 3.")] = 2,
    codec: Annotated[
        list[str] | None,
        option(
            "--codec",
            "VAR='<json>' for one variable, or '<json>' for all others; a codec or a list.",
        ),
    ] = None,
    group: Annotated[
        str | None,
        group_option(
            "Convert this group (and its nested groups) only, kept at its place; default: all."
        ),
    ] = None,
) -> None:
    """Convert a NetCDF4/HDF5 or NetCDF-3 file to Zarr, keeping each variable's compression
    (NetCDF-3 has none: its variables get the default codec)."""
    from accumulus.ingest.convert import convert as convert_file
    from accumulus.ingest.convert import parse_codec_options

    per_variable, default = parse_codec_options(codec or [])
    plan = convert_file(
        src,
        dest,
        zarr_format=zarr_format,
        codecs=per_variable,
        default_codec=default,
        group=group,
    )
    for array in plan.arrays:
        codecs = ", ".join(c["id"] for c in array.codecs) or "none"
        console.print(f"{array.path} {list(array.shape)} {array.dtype}: {codecs}", highlight=False)
    if plan.note:
        console.print(plan.note, highlight=False, soft_wrap=True)
    console.print(
        f"wrote {dest} from {plan.source_format} (Zarr v{zarr_format}, {len(plan.arrays)} arrays)"
    )


def rechunk(
    src: Annotated[str, typer.Argument(help="Cube path or URL to read.")],
    dest: Annotated[
        str, typer.Argument(help="Store to write (must not exist): dir, memory://, s3://.")
    ],
    chunks: Annotated[
        list[str],
        option(
            "--chunks",
            "dim=rule: time=month, time=year, lat=90 or time=31,28,31,... (repeatable; "
            "several in one: time=month,lat=90). Dimensions not named keep their chunks.",
        ),
    ],
    zarr_format: Annotated[
        int | None,
        option("--zarr-format", "2 or 3. Default: the source's, or 3 when chunks vary."),
    ] = None,
    scheduler: Scheduler = None,
    endpoint_url: EndpointUrl = None,
    storage_option: StorageOption = None,
    allow_references: AllowReferences = None,
) -> None:
    """Copy a cube with other chunks (e.g. one chunk per month), rebuilding accumulations."""
    from accumulus.grid import parse_chunk_rules
    from accumulus.rechunk import rechunk as rechunk_cube

    with ProgressBar("rechunking") as report:
        result = rechunk_cube(
            src,
            dest,
            chunks,
            zarr_format,
            scheduler=scheduler,
            progress=report,
            **reading(endpoint_url, storage_option, allow_references),
        )
    named = set(parse_chunk_rules(chunks))
    for path, sizes in result.chunks.items():
        if named & set(sizes):
            text = ", ".join(f"{dim} {_chunk_sizes_text(s)}" for dim, s in sizes.items())
            console.print(f"{path}: {text}", highlight=False)
    rebuilt = f"; accumulations rebuilt for {', '.join(result.accumulated)}"
    console.print(
        f"wrote {result.dest} (Zarr v{result.zarr_format}, {len(result.chunks)} arrays"
        f"{rebuilt if result.accumulated else ''}) in {result.seconds:.1f} s",
        highlight=False,
    )
    if any(_varies(s) for sizes in result.chunks.values() for s in sizes.values()):
        _say_how_xarray_reads(result.dest)


def _is_variable(grid: Any) -> bool:
    from zarr.core.metadata.v3 import RectilinearChunkGridMetadata

    return isinstance(grid, RectilinearChunkGridMetadata)


def _varies(sizes: tuple[int, ...]) -> bool:
    """Whether chunk sizes along a dimension vary (a last partial chunk does not count)."""
    return len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0])


def _say_how_xarray_reads(store: str) -> None:
    """Variable chunks (Zarr v3's rectilinear grid) are read by zarr-python only with its
    experimental setting on, which accumulus turns on for its own calls alone."""
    console.print(
        f"[dim]{store} has variable chunks (ZEP 3): accumulus reads it as it is; xarray and "
        "zarr read it once zarr's setting is on: zarr.config.set({'array.rectilinear_chunks': "
        "True}), or ZARR_ARRAY__RECTILINEAR_CHUNKS=True in the environment (see "
        "docs/variable-chunking.md)[/]",
        highlight=False,
    )


def _chunk_sizes_text(sizes: tuple[int, ...]) -> str:
    count = f"{len(sizes)} chunk{'s' if len(sizes) != 1 else ''}"
    if len(set(sizes[:-1])) <= 1 and (not sizes or sizes[-1] <= sizes[0]):
        return f"{sizes[0] if sizes else 0} ({count})"
    shown = ",".join(map(str, sizes[:12])) + (",…" if len(sizes) > 12 else "")
    return f"{shown} ({count})"
