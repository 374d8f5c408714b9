"""How the files beside this script were made from the producers' own files (see
../README.md): run ``python subset.py MIRRORS`` where MIRRORS holds the fetched
repositories as OWNER+NAME/repo bare git directories.

A subset keeps every variable, dimension name, type, attribute (in order), fill value,
compression and chunk shape of the original; only the index ranges below are cut, and the
stored numbers are copied as stored (no masking or scaling on the way). ``history`` says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np

HERE = Path(__file__).parent

# (repository, path in it, file written here, {dimension: index range kept}, format)
SUBSETS = [
    (
        "nasa+harmony-opendap-subsetter",
        "tests/data/f16_ssmis_20200102v7.nc",
        "f16_ssmis_20200102v7_subset.nc",
        {"latitude": slice(315, 405), "longitude": slice(0, 180)},
    ),
    (
        "SciTools+iris-test-data",
        "test_data/NetCDF/rotated/xyt/small_rotPole_precipitation.nc",
        "small_rotPole_precipitation_subset.nc",
        {"rlat": slice(60, 120), "rlon": slice(50, 110)},
    ),
    (
        "NCAR+geocat-datafiles",
        "netcdf_files/b003_TS_200-299.nc",
        "b003_TS_200-299_subset.nc",
        {"time": slice(0, 36), "lat": slice(24, 40), "lon": slice(0, 32)},
    ),
    (
        "NCAR+geocat-datafiles",
        "netcdf_files/hgt.nc",
        "hgt_subset.nc",
        {"lat": slice(0, 73, 4), "lon": slice(0, 144, 4)},
    ),
    (
        "SciTools+iris-test-data",
        "test_data/NetCDF/global/xyt/SMALL_total_column_co2.nc",
        "SMALL_total_column_co2_subset.nc",
        {"latitude": slice(0, 161, 2), "longitude": slice(0, 320, 2)},
    ),
]
# Vendored whole.
WHOLE = [
    (
        "nasa+harmony-opendap-subsetter",
        "tests/data/GPM_3IMERGHH_bounds.nc4",
        "GPM_3IMERGHH_bounds.nc4",
    ),
    (
        "NCAR+geocat-datafiles",
        "netcdf_files/tas_mod1_hist_rectilin_grid_2D.nc",
        "tas_mod1_hist_rectilin_grid_2D.nc",
    ),
]


def extract(mirrors: Path, repository: str, path: str, out: Path) -> None:
    git = mirrors / repository / "repo"
    out.write_bytes(
        subprocess.run(
            ["git", "-C", str(git), "show", f"HEAD:{path}"], check=True, capture_output=True
        ).stdout
    )


def subset(source: Path, out: Path, keep: dict[str, slice], origin: str) -> None:
    with netCDF4.Dataset(source) as src, netCDF4.Dataset(out, "w", format=src.file_format) as dst:
        src.set_auto_maskandscale(False)
        src.set_auto_chartostring(False)
        attrs = {a: src.getncattr(a) for a in src.ncattrs()}
        note = f"subset {_ranges(keep)} of {origin} by accumulus tests/data/real/subset.py"
        attrs["history"] = f"{note}\n{attrs['history']}" if "history" in attrs else note
        dst.setncatts(attrs)
        for name, dim in src.dimensions.items():
            size = len(range(*keep[name].indices(len(dim)))) if name in keep else len(dim)
            dst.createDimension(name, None if dim.isunlimited() else size)
        for name, var in src.variables.items():
            options = {}
            if src.data_model == "NETCDF4":
                filters = var.filters()
                chunking = var.chunking()
                options = {
                    "zlib": filters["zlib"],
                    "complevel": filters["complevel"],
                    "shuffle": filters["shuffle"],
                }
                options["contiguous"] = chunking == "contiguous"
                if chunking != "contiguous":
                    options["chunksizes"] = chunking
            fill = var.getncattr("_FillValue") if "_FillValue" in var.ncattrs() else None
            out_var = dst.createVariable(
                name, var.dtype, var.dimensions, fill_value=fill, **options
            )
            out_var.set_auto_maskandscale(False)
            out_var.set_auto_chartostring(False)
            out_var.setncatts({a: var.getncattr(a) for a in var.ncattrs() if a != "_FillValue"})
            index = tuple(keep.get(d, slice(None)) for d in var.dimensions)
            values = var[index] if var.dimensions else var[...]
            out_var[...] = np.asarray(values)


def _ranges(keep: dict[str, slice]) -> str:
    return ", ".join(
        f"{d} {s.start}:{s.stop}" + (f":{s.step}" if s.step else "") for d, s in keep.items()
    )


def main(mirrors: Path) -> None:
    for repository, path, name, keep in SUBSETS:
        original = HERE / f".{name}.original"
        extract(mirrors, repository, path, original)
        try:
            subset(original, HERE / name, keep, f"{repository.replace('+', '/')} {path}")
        finally:
            original.unlink()
    for repository, path, name in WHOLE:
        extract(mirrors, repository, path, HERE / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
