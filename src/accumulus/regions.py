"""Shapes to average over: named regions of region sets shipped with the software, and
features of a user's GeoJSON or shapefile.

Region sets (all offline):

- ``ar6``: the IPCC AR6 WGI reference regions (Iturbide et al., 2020), shipped in
  ``accumulus/data/ar6`` (CC BY 4.0; regionmask would fetch them at run time);
- ``srex``, ``giorgi``, ``prudence``: the regions regionmask defines in its own code.

A region is named by its abbreviation or its name, in any case: ``ar6:WAF``,
``giorgi:"Amazon Basin"``. A file is read with geopandas (GeoJSON, shapefile, zipped
shapefile, GeoPackage...), reprojected to longitude/latitude when it says it is in another
CRS, and a feature is picked by a property value: ``basins.geojson:Amazon`` (any property
equal to ``Amazon``) or ``basins.geojson:NAME=Amazon``. Every feature that matches is taken
(their union).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from accumulus.errors import AccumulusError

MAX_GEOJSON_BYTES = 4 * 2**20  # an uploaded shape's size limit (service)


@dataclass(frozen=True)
class Shape:
    """A shape to average over, in longitude/latitude degrees."""

    name: str  # how it was asked for: "ar6:WAF", "basins.geojson:Amazon"
    label: str  # how titles call it: "Western-Africa (AR6 WAF)"
    geometry: Any  # a shapely (Multi)Polygon
    key: str  # identifies the geometry (hash of its WKB), for caches

    def to_dict(self) -> dict[str, Any]:
        import shapely

        return {
            "name": self.name,
            "label": self.label,
            "bounds": list(self.geometry.bounds),
            "geometry": json.loads(shapely.to_geojson(self.geometry)),
        }


@dataclass(frozen=True)
class Region:
    abbrev: str
    name: str
    geometry: Any


@dataclass(frozen=True)
class RegionSet:
    name: str
    description: str
    load: Callable[[], Sequence[Region]]


def _ar6() -> list[Region]:
    import geopandas

    folder = resources.files("accumulus") / "data" / "ar6"
    with resources.as_file(folder / "ar6.shp") as path:
        frame = geopandas.read_file(path)
    return [Region(row.Acronym, row.Name, row.geometry) for row in frame.itertuples(index=False)]


def _regionmask(name: str) -> Callable[[], list[Region]]:
    def load() -> list[Region]:
        import regionmask

        regions = getattr(regionmask.defined_regions, name)
        return [
            Region(abbrev, full, polygon)
            for abbrev, full, polygon in zip(
                regions.abbrevs, regions.names, regions.polygons, strict=True
            )
        ]

    return load


REGION_SETS: Mapping[str, RegionSet] = {
    "ar6": RegionSet(
        "ar6", "IPCC AR6 WGI reference regions (Iturbide et al., 2020; 58 land and ocean)", _ar6
    ),
    "srex": RegionSet(
        "srex", "IPCC SREX regions (Seneviratne et al., 2012; regionmask)", _regionmask("srex")
    ),
    "giorgi": RegionSet(
        "giorgi", "Giorgi regions (Giorgi and Francisco, 2000; regionmask)", _regionmask("giorgi")
    ),
    "prudence": RegionSet(
        "prudence",
        "PRUDENCE European regions (Christensen and Christensen, 2007; regionmask)",
        _regionmask("prudence"),
    ),
}


@cache
def regions_of(set_name: str) -> tuple[Region, ...]:
    region_set = REGION_SETS.get(set_name.lower())
    if region_set is None:
        raise AccumulusError(
            f"region {set_name}: no region set {set_name!r}; sets are {sorted(REGION_SETS)}"
        )
    return tuple(region_set.load())


def region_sets() -> list[dict[str, Any]]:
    """Every region set with its regions' abbreviations, names and bounds (west, south,
    east, north)."""
    return [
        {
            "name": s.name,
            "description": s.description,
            "regions": [
                {"abbrev": r.abbrev, "name": r.name, "bounds": list(r.geometry.bounds)}
                for r in regions_of(s.name)
            ],
        }
        for s in REGION_SETS.values()
    ]


def as_shape(value: Any) -> Shape | None:
    """A shape from what a user gives: a ``Shape``; ``"SET:NAME"`` naming a region of a
    region set; ``"FILE[:VALUE]"`` naming a GeoJSON file or shapefile; a GeoJSON mapping; or
    a shapely geometry (longitude/latitude). None stays None."""
    if value is None or isinstance(value, Shape):
        return value
    if isinstance(value, Mapping):
        return shape_from_geojson(value)
    if isinstance(value, str | os.PathLike):
        text = os.fspath(value)
        if text.partition(":")[0].lower() in REGION_SETS and not Path(text).exists():
            return named_region(text)
        return shape_from_file(text)
    if hasattr(value, "geom_type"):
        return _shape("geometry", "the shape given", _polygonal(value, "shape"))
    raise AccumulusError(
        f"shape: expected SET:NAME, a file, GeoJSON or a shapely geometry, got {value!r}"
    )


def named_region(spec: str) -> Shape:
    """``SET:NAME``: a region of a region set, by abbreviation or name (any case)."""
    set_name, sep, wanted = spec.partition(":")
    if not sep or not wanted.strip():
        raise AccumulusError(
            f"region {spec!r}: write SET:NAME, e.g. ar6:WAF; sets are {sorted(REGION_SETS)}"
        )
    regions = regions_of(set_name.strip())
    wanted = wanted.strip().strip('"').lower()
    for region in regions:
        if wanted in (region.abbrev.lower(), region.name.lower()):
            label = f"{region.name} ({set_name.upper()} {region.abbrev})"
            return _shape(f"{set_name.lower()}:{region.abbrev}", label, region.geometry)
    known = ", ".join(r.abbrev for r in regions)
    raise AccumulusError(f"region {spec}: no region {wanted!r} in {set_name}; regions: {known}")


def shape_from_file(spec: str | os.PathLike[str]) -> Shape:
    """``FILE`` or ``FILE:VALUE`` or ``FILE:PROPERTY=VALUE``: features of a GeoJSON file or
    shapefile (any format geopandas reads)."""
    text = os.fspath(spec)
    path, wanted = Path(text), None
    if not path.exists() and ":" in text:
        head, _, tail = text.rpartition(":")
        path, wanted = Path(head), tail
    if not path.exists():
        raise AccumulusError(f"--shape {text}: no such file {str(path)!r}")
    import geopandas

    try:
        frame = geopandas.read_file(path)
    except Exception as exc:  # pyogrio's errors for unreadable or unknown formats
        raise AccumulusError(
            f"--shape {text}: cannot read it as GeoJSON or a shapefile: {exc}"
        ) from None
    return _pick(frame, wanted, f"--shape {text}", path.name)


def shape_from_geojson(document: str | bytes | Mapping[str, Any], name: str = "uploaded") -> Shape:
    """A GeoJSON geometry, Feature or FeatureCollection (its union), in longitude/latitude."""
    import shapely

    if isinstance(document, bytes | str):
        if len(document) > MAX_GEOJSON_BYTES:
            raise AccumulusError(
                f"shape {name}: {len(document)} bytes of GeoJSON, more than the limit of "
                f"{MAX_GEOJSON_BYTES}"
            )
        try:
            document = json.loads(document)
        except ValueError as exc:  # not JSON, not UTF-8, or an integer of over 4300 digits
            raise AccumulusError(f"shape {name}: not JSON: {exc}") from None
        except RecursionError:
            raise AccumulusError(f"shape {name}: not GeoJSON: nested too deeply") from None
    if not isinstance(document, Mapping):
        raise AccumulusError(
            f"shape {name}: expected a GeoJSON object, got {type(document).__name__}"
        )
    kind = document.get("type")
    if kind == "FeatureCollection":
        features = document.get("features") or []
        if not isinstance(features, list) or not all(isinstance(f, Mapping) for f in features):
            raise AccumulusError(
                f"shape {name}: the features of a FeatureCollection must be a list of Feature "
                "objects"
            )
        geometries = [f.get("geometry") for f in features]
    elif kind == "Feature":
        geometries = [document.get("geometry")]
    else:
        geometries = [document]
    shapes = []
    for geometry in geometries:
        try:
            shapes.append(shapely.from_geojson(json.dumps(geometry)))
        except shapely.errors.ShapelyError as exc:  # GEOS refusing the geometry
            problem = " ".join(str(exc).split())  # GEOS ends its messages with a newline
            raise AccumulusError(f"shape {name}: not a GeoJSON geometry: {problem}") from None
    return _shape(name, name, _polygonal(shapely.union_all(shapes), f"shape {name}"))


def _pick(frame: Any, wanted: str | None, where: str, filename: str) -> Shape:
    if frame.crs is not None and not frame.crs.equals("EPSG:4326"):
        frame = frame.to_crs("EPSG:4326")
    columns = [c for c in frame.columns if c != frame.geometry.name]
    if wanted is None:
        if len(frame) != 1:
            raise AccumulusError(
                f"{where}: {len(frame)} features; pick one with FILE:VALUE or "
                f"FILE:PROPERTY=VALUE (properties: {columns})"
            )
        chosen, label = frame, filename
    else:
        column, _, value = wanted.rpartition("=") if "=" in wanted else ("", "", wanted)
        searched = [column] if column else columns
        if column and column not in columns:
            raise AccumulusError(f"{where}: no property {column!r}; properties: {columns}")
        texts = frame[searched].astype(str)
        match = texts.eq(value).any(axis=1)
        if not match.any():  # then any case
            match = texts.apply(lambda c: c.str.lower()).eq(value.lower()).any(axis=1)
        if not match.any():
            raise AccumulusError(
                f"{where}: no feature has a property equal to {value!r} (properties: {columns})"
            )
        # Named as the file spells it, whatever case the user typed.
        spelled = next(t for t in texts[match].to_numpy().ravel() if t.lower() == value.lower())
        chosen, label = frame[match], f"{spelled} ({filename})"
    import shapely

    geometry = _polygonal(shapely.union_all(list(chosen.geometry)), where)
    return _shape(f"{filename}:{wanted}" if wanted else filename, label, geometry)


def _polygonal(geometry: Any, where: str) -> Any:
    """Only areas can hold cell centres: polygons and multipolygons (from collections too)."""
    import shapely

    polygons = [
        g for g in shapely.get_parts(geometry) if g.geom_type in ("Polygon", "MultiPolygon")
    ]
    if not polygons or shapely.union_all(polygons).is_empty:
        raise AccumulusError(
            f"{where}: the shape has no area (a {geometry.geom_type}); give a polygon"
        )
    return shapely.make_valid(shapely.union_all(polygons))


def _shape(name: str, label: str, geometry: Any) -> Shape:
    import shapely

    key = hashlib.sha256(shapely.to_wkb(geometry)).hexdigest()[:16]
    return Shape(name, label, geometry, key)
