"""Write the small copies in this directory from the producers' files (run from the repository
root; the mirrors are bare git clones of the two public repositories):

    .venv/bin/python tests/data/real_layouts/cut.py GEOCAT_GIT IRIS_TEST_DATA_GIT

A copy keeps its file's layout (netCDF-3 classic, dimensions with their unlimited flag,
variables in their order with their types, attributes in their order except ``_FillValue``,
which netCDF4-python writes first, global attributes) and its values, cut along some
dimensions only (``CUTS``); a file with nothing to cut is copied byte for byte."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import netCDF4

HERE = Path(__file__).parent

# (repository, path in it, copy here, index ranges kept per dimension: the rest whole)
CUTS = [
    ("geocat", "netcdf_files/sst.nc", "sst.nc", {}),
    ("geocat", "netcdf_files/sst30e_netcdf.nc", "sst30e_netcdf_3months.nc", {"time": (0, 3)}),
    (
        "iris",
        "test_data/NetCDF/rotated/xyt/small_rotPole_precipitation.nc",
        "small_rotPole_precipitation_window.nc",
        {"rlat": (45, 145), "rlon": (37, 137)},
    ),
]


def cut(source: Path, target: Path, ranges: dict[str, tuple[int, int]]) -> None:
    with netCDF4.Dataset(source) as src:
        file_format = src.file_format
    with netCDF4.Dataset(source) as src, netCDF4.Dataset(target, "w", format=file_format) as out:
        _copy(src, out, ranges)


def _copy(src: netCDF4.Dataset, out: netCDF4.Dataset, ranges: dict[str, tuple[int, int]]) -> None:
    src.set_auto_maskandscale(False)
    out.setncatts({k: src.getncattr(k) for k in src.ncattrs()})
    for name, dim in src.dimensions.items():
        lo, hi = ranges.get(name, (0, len(dim)))
        out.createDimension(name, None if dim.isunlimited() else hi - lo)
    for name, var in src.variables.items():
        attrs = {k: var.getncattr(k) for k in var.ncattrs()}
        fill = attrs.pop("_FillValue", None)  # written first, by createVariable
        new = out.createVariable(name, var.dtype, var.dimensions, fill_value=fill)
        new.set_auto_maskandscale(False)
        new.setncatts(attrs)  # the others in their order
        index = tuple(slice(*ranges.get(d, (None, None))) for d in var.dimensions)
        new[...] = var[index] if var.dimensions else var.getValue()


def main(geocat: str, iris: str) -> None:
    repos = {"geocat": geocat, "iris": iris}
    with tempfile.TemporaryDirectory() as tmp:
        for repo, path, name, ranges in CUTS:
            original = Path(tmp) / Path(path).name
            original.write_bytes(
                subprocess.run(
                    ["git", "-C", repos[repo], "show", f"HEAD:{path}"],
                    check=True,
                    capture_output=True,
                ).stdout
            )
            if ranges:
                cut(original, HERE / name, ranges)
            else:  # the producer's bytes
                (HERE / name).write_bytes(original.read_bytes())


if __name__ == "__main__":
    main(*sys.argv[1:])
