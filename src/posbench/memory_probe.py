"""How many bytes this process may still allocate: the one probe every memory check reads (evaluation's length
check, evaluation/lengths.py, which prices every suite, first_token's kept probabilities included).

The machine's physical memory is not that number: under `ulimit -v`, in a container's cgroup or beside other work, a
length the physical memory admits fails tens of seconds later in the allocator. Each source below gives what is left
under its own limit; the smallest wins, and its name travels with it so a refusal says which limit bound.

  MemAvailable        /proc/meminfo: what the kernel can hand out without swapping (reclaimable cache included)
  RLIMIT_AS           resource.getrlimit's soft limit on the address space, minus this process's VmSize
  RLIMIT_DATA         likewise on the data segment (heap, anonymous mappings), minus VmData
  cgroup memory       v2 memory.max (v1 memory.limit_in_bytes) of this process's cgroup and of each ancestor, minus
                      its usage (memory.current, v1 memory.usage_in_bytes) less its inactive file cache, which the
                      kernel reclaims before it refuses an allocation (what `docker stats` calls the working set)

A CUDA device: its free memory (torch.cuda.mem_get_info) plus what this process's caching allocator holds unused.
The sources are module attributes (PROC, CGROUP_ROOT, getrlimit) so a test can point them at a made-up machine.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
getrlimit = resource.getrlimit
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit value (9223372036854771712)
NO_LIMIT = 1 << 62


@dataclass(frozen=True)
class Available:
    """Bytes this process may still allocate, and the limit that says so (e.g. "RLIMIT_AS")."""

    bytes: int
    source: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None  # "max" (v2's no limit), or a damaged file: no limit known


def _kib_fields(path: Path) -> dict[str, int]:
    """`Name:   123 kB` lines (/proc/meminfo, /proc/self/status) as bytes by name."""
    out = {}
    for line in (_read(path) or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def _stat_field(path: Path, name: str) -> int:
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _meminfo() -> list[Available]:
    fields = _kib_fields(PROC / "meminfo")
    return [Available(fields["MemAvailable"], "MemAvailable")] if "MemAvailable" in fields else []


def _rlimits() -> list[Available]:
    status = _kib_fields(PROC / "self" / "status")
    out = []
    for name, limit_id, used in (("RLIMIT_AS", resource.RLIMIT_AS, "VmSize"),
                                 ("RLIMIT_DATA", resource.RLIMIT_DATA, "VmData")):
        soft, _hard = getrlimit(limit_id)
        if soft != resource.RLIM_INFINITY and soft >= 0:
            out.append(Available(max(0, soft - status.get(used, 0)), name))
    return out


def _ancestors(root: Path, relative: str) -> list[Path]:
    """`root/relative` and each directory above it up to `root` (a limit set on an ancestor binds too); a
    container whose cgroup namespace hides the path shows its own cgroup at `root`."""
    parts = [p for p in relative.split("/") if p and p != ".."]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _cgroups() -> list[Available]:
    out = []
    for line in (_read(PROC / "self" / "cgroup") or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2: one unified hierarchy
            files, root = ("memory.max", "memory.current", "memory.stat"), CGROUP_ROOT
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            files, root = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"), CGROUP_ROOT / "memory"
        else:
            continue
        limit_file, usage_file, stat_file = files
        for directory in _ancestors(root, relative):
            limit = _int(_read(directory / limit_file))
            if limit is None or limit >= NO_LIMIT:
                continue
            usage = _int(_read(directory / usage_file)) or 0
            working = max(0, usage - _stat_field(directory / stat_file, "inactive_file"))
            out.append(Available(max(0, limit - working), f"cgroup {limit_file} of {directory}"))
    return out


def host_available() -> Available:
    """The smallest of the sources (module doc); the physical memory when none can be read."""
    found = _meminfo() + _rlimits() + _cgroups()
    if not found:
        import os

        return Available(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "physical memory")
    return min(found, key=lambda a: a.bytes)


def available(device) -> Available:
    """What this process may still allocate on `device` (a torch.device): a CUDA device's free memory and what this
    process's allocator holds unused there, or the host's (`host_available`)."""
    if device.type == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return Available(free + cached, f"free memory of {device}")
    return host_available()
