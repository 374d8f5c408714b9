"""How many bytes a NetCDF-3 file must have, from its header.

netcdf-c reads a truncated NetCDF-3 file without complaint: values past the end of the file
come back as zeros. Before converting, the file's size is compared with the extent its header
declares (the end of the last variable's data), so a partial download is refused instead of
silently converted. The header layout is the NetCDF-3 format specification's (classic,
64-bit offset and 64-bit data "CDF5"); only what locates the data is kept.
"""

from __future__ import annotations

import struct
from math import prod

# The first four bytes of a NetCDF-3 file: "CDF" and the format version.
NETCDF3_SIGNATURES = {
    b"CDF\x01": "NetCDF-3 classic",
    b"CDF\x02": "NetCDF-3 64-bit offset",
    b"CDF\x05": "NetCDF-3 64-bit data (CDF5)",
}
_ABSENT = 0
_TAGS = {10: "dimensions", 11: "variables", 12: "attributes"}
# nc_type -> bytes per value (NC_BYTE, CHAR, SHORT, INT, FLOAT, DOUBLE, UBYTE, USHORT, UINT,
# INT64, UINT64).
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}
_STREAMING = 0xFFFFFFFF


class HeaderError(ValueError):
    """The header is not a NetCDF-3 header (or it is cut short)."""


class _Reader:
    def __init__(self, data: bytes, version: int) -> None:
        self.data = data
        self.at = 4
        self.wide = version == 5  # CDF5: counts and sizes are 64-bit
        self.wide_offsets = version in (2, 5)

    def _unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise HeaderError("the header is cut short")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value

    def int32(self) -> int:
        return self._unpack(">I")

    def count(self) -> int:
        return self._unpack(">Q" if self.wide else ">I")

    def offset(self) -> int:
        return self._unpack(">Q" if self.wide_offsets else ">I")

    def skip(self, n: int) -> None:
        self.at += (n + 3) // 4 * 4  # padded to 4 bytes

    def name(self) -> None:
        self.skip(self.count())

    def list_header(self, expected: str) -> int:
        tag, n = self.int32(), self.count()
        if tag == _ABSENT and n == 0:
            return 0
        if _TAGS.get(tag) != expected:
            raise HeaderError(f"expected the {expected} list, found tag {tag}")
        return n

    def attributes(self) -> None:
        for _ in range(self.list_header("attributes")):
            self.name()
            size = _TYPE_SIZES.get(self.int32())
            if size is None:
                raise HeaderError("unknown attribute type")
            self.skip(self.count() * size)


def declared_size(header: bytes) -> int:
    """The least file size (bytes) the NetCDF-3 ``header`` declares: the end of the last
    variable's data (for record variables, within the last record). ``header`` is the start
    of the file, at least as long as the header."""
    version = header[3] if len(header) >= 4 and header[:3] == b"CDF" else None
    if version not in (1, 2, 5):
        raise HeaderError("no NetCDF-3 signature")
    reader = _Reader(header, version)
    records = reader.count()
    dimensions = []
    for _ in range(reader.list_header("dimensions")):
        reader.name()
        dimensions.append(reader.count())
    reader.attributes()
    variables = []  # (is a record variable, begin, bytes in one record or in all)
    for _ in range(reader.list_header("variables")):
        reader.name()
        dims = [reader.count() for _ in range(reader.count())]
        reader.attributes()
        size = _TYPE_SIZES.get(reader.int32())
        if size is None or any(d >= len(dimensions) for d in dims):
            raise HeaderError("a variable has an unknown type or dimension")
        reader.count()  # vsize: padded, and wrong for large variables; recomputed below
        begin = reader.offset()
        shape = [dimensions[d] for d in dims]
        is_record = bool(shape) and shape[0] == 0  # the unlimited dimension has length 0
        nbytes = prod(shape[1:] if is_record else shape) * size
        variables.append((is_record, begin, nbytes))
    if records == _STREAMING:
        records = 0  # being written: only the fixed-size variables are known
    record_vars = [v for v in variables if v[0]]
    # A record holds each record variable's slab, padded to 4 bytes unless it is the only one.
    record_size = sum(n if len(record_vars) == 1 else (n + 3) // 4 * 4 for _, _, n in record_vars)
    end = reader.at
    for is_record, begin, nbytes in variables:
        if is_record:
            if records and nbytes:
                end = max(end, begin + (records - 1) * record_size + nbytes)
        elif nbytes:
            end = max(end, begin + nbytes)
    return end
