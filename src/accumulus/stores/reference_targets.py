"""Where a kerchunk reference set may read: the allow-list of its targets.

A reference set maps chunk keys to byte ranges of other files, named by path or URL. A set
made by someone else may name any file the reader can open (``/etc/passwd``,
``/proc/self/environ``, a FIFO that blocks whoever reads it) or any host the reader can
reach (``http://127.0.0.1:PORT/secret``), and the reader would hand those bytes out as
values. So a set reads only under

- its own location: the directory holding it (a local set), its bucket (object storage) or
  its host (HTTP). A set made by ``append --virtual`` records the granules it was made
  from (``accumulus.virtual.granules``): it then reads only their directories, those of
  them within its own location;
- the prefixes the reader allows (``--allow-references PREFIX``, ``allow_references=``).

What a set records narrows what it may read and never widens it: a set is no more
trustworthy than its author, and one line of JSON naming ``/`` as its granules' directory
would otherwise allow everything. Below what a set allows itself, hidden names (``.ssh``,
``.profile``) are not read. Never read, whatever is allowed: ``/proc``, ``/dev`` and ``/sys``,
and anything but a regular file (checked when the file is opened: ``reference_sets``).
Local targets are compared after resolving symbolic links and ``..``, as the file would be
opened; URLs after normalizing scheme, host, port and dot segments (percent-decoded).

Storage options (headers, keys, tokens) are given for the set's own location: a target gets
them when it is on the set's own site (an HTTP host, or the same object store), or when the
set is local (its options can only be meant for its targets).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

from accumulus.errors import AccumulusError

# Read by no reference set, whatever is allowed: the kernel's views of processes, devices
# and drivers (regular-looking files whose bytes are secrets or never end).
NEVER_READ = ("/proc", "/dev", "/sys")
# Protocols fsspec reads from the local disk (``split_protocol`` gives None for a path).
LOCAL_PROTOCOLS = (None, "file", "local")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HINT = (
    "allow its location with --allow-references PREFIX (allow_references= in Python) if "
    "you trust it"
)


class ReferenceRefused(AccumulusError):
    """A reference of a set names a target the set may not read, or cannot be read. The
    message names the reference's key, never its target."""


@dataclass(frozen=True)
class Location:
    """A directory (and all below it) on the local disk (``site`` "") or at a site
    (``https://host:443``, ``s3://bucket``), as a normalized path ending in "/"."""

    site: str
    path: str
    given: bool  # named by the reader; else derived from the set (no hidden names below)

    def holds(self, site: str, path: str) -> bool:
        return site == self.site and (path == self.path.rstrip("/") or path.startswith(self.path))

    def hides(self, path: str) -> bool:
        """Whether ``path`` (which this location holds) is hidden below it, for a location
        the set allows itself."""
        below = path[len(self.path) :].split("/")
        return not self.given and any(part.startswith(".") for part in below)


@dataclass(frozen=True)
class Target:
    """Where a reference reads: a resolved local path (``site`` "") or a URL."""

    url: str
    site: str  # "" for a local path

    @property
    def local(self) -> bool:
        return not self.site


@dataclass(frozen=True)
class ReferenceTargets:
    """The locations a reference set may read, and where its storage options may go."""

    label: str  # how messages name the set
    locations: tuple[Location, ...]
    options_site: str | None  # targets on this site get the storage options; None: all

    @classmethod
    def for_set(
        cls,
        location: str,
        recorded: Sequence[str] | None,
        allow: Iterable[str] = (),
    ) -> ReferenceTargets:
        """The allow-list of the set at ``location`` (a path or URL), which records the
        granule URLs ``recorded`` (None: it records none), read with ``allow``."""
        own = _own_location(location)
        derived = [own]
        if recorded is not None:
            directories = {_directory(url) for url in recorded if _parsable(url)}
            derived = [d for d in directories if own.holds(d.site, d.path)]
        given = [
            Location(*_normalized(prefix, "--allow-references"), given=True) for prefix in allow
        ]
        scheme = split_protocol(location)[0]
        return cls(
            label=location,
            locations=(*given, *derived),
            options_site=None if scheme in LOCAL_PROTOCOLS else _options_site(location),
        )

    def resolve(self, key: str, url: object) -> Target:
        """The target of reference ``key`` (naming ``url``) when the set may read it, else
        ``ReferenceRefused`` naming the key."""
        if not isinstance(url, str) or not url or not _parsable(url):
            raise self.refused(key, "does not name a file by a path or URL that can be checked")
        site, path = _resolved(url)
        if not site and any(path == p or path.startswith(p + "/") for p in NEVER_READ):
            raise self.refused(key, "points into /proc, /dev or /sys, which are never read")
        for location in self.locations:
            if location.holds(site, path) and not location.hides(path):
                return Target(path if not site else url, site)
        raise self.refused(key, f"points outside the locations this set may read; {_HINT}")

    def gets_options(self, target: Target) -> bool:
        """Whether the storage options may be sent with a read of ``target``."""
        if target.local or self.options_site is None:
            return True
        return _options_site(target.url) == self.options_site

    def refused(self, key: str, why: str) -> ReferenceRefused:
        return ReferenceRefused(f"{self.label}: reference {key} {why}")


def directories_to_allow(location: str, urls: Iterable[str]) -> list[str]:
    """The directories of the files ``urls`` that a reference set at ``location`` does not
    read by itself (outside its own location): what its readers must allow."""
    own = _own_location(location)
    outside = {_directory(url) for url in urls if _parsable(url)}
    return sorted(
        (d.site + d.path if d.site else d.path) for d in outside if not own.holds(d.site, d.path)
    )


def _parsable(url: str) -> bool:
    """A single path or URL: fsspec's chained URLs (``simplecache::file://…``) and odd
    schemes are not checked, so not read."""
    if "::" in url or "\x00" in url:
        return False
    protocol = split_protocol(url)[0]
    return protocol is None or (protocol.isascii() and protocol.replace("+", "").isalnum())


def _resolved(url: str) -> tuple[str, str]:
    """(site, path) of a target: a local path as fsspec would open it (relative to the
    working directory, ``~`` expanded) with links and ``..`` resolved; a URL's site and its
    percent-decoded path with dot segments removed."""
    if split_protocol(url)[0] in LOCAL_PROTOCOLS:
        return "", os.path.realpath(LocalFileSystem._strip_protocol(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _DEFAULT_PORTS:
        host = parts.hostname or ""
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError:  # a port that is not a number
            port = -1
        site = f"{scheme}://{host}:{port}"
    else:
        site = f"{scheme}://{parts.netloc}"
    return site, posixpath.normpath("/" + unquote(parts.path).lstrip("/"))


def _normalized(prefix: str, option: str) -> tuple[str, str]:
    """(site, directory path ending in "/") of a prefix the reader allows."""
    if not isinstance(prefix, str) or not prefix.strip() or not _parsable(prefix):
        raise AccumulusError(f"{option} must name a directory or URL prefix, got {prefix!r}")
    site, path = _resolved(prefix.strip())
    return site, path.rstrip("/") + "/"


def _own_location(url: str) -> Location:
    """Where a set at ``url`` is: its local directory, its bucket (object storage) or its
    host (HTTP)."""
    site, _ = _resolved(url)
    return _directory(url) if not site else Location(site, "/", given=False)


def _directory(url: str) -> Location:
    """The directory of the file at ``url``."""
    site, path = _resolved(url)
    return Location(site, posixpath.dirname(path).rstrip("/") + "/", given=False)


def _options_site(url: str) -> str:
    """Where storage options given for ``url`` are meant to go: its host (HTTP), or its
    protocol (an object store: one endpoint and one set of credentials for all buckets)."""
    site, _ = _resolved(url)
    scheme = site.split("://")[0]
    return site if scheme in _DEFAULT_PORTS else scheme
