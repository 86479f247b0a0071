"""Item 5: the memory probe (posbench/memory_probe.py) knows the process's limits, not the physical memory:
RLIMIT_AS under a real `setrlimit`, and MemAvailable and cgroup v1/v2 limits on a made-up machine (its sources
pointed at files written here); the smallest wins and names itself."""

import resource
import subprocess
import sys

import pytest

from posbench import memory_probe

GiB = 1 << 30


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A made-up /proc and /sys/fs/cgroup with 8 GiB available and no rlimit; tests add limits to it."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    cgroup.mkdir()
    (proc / "meminfo").write_text(f"MemTotal:       {64 * GiB // 1024} kB\nMemAvailable:   {8 * GiB // 1024} kB\n")
    (proc / "self" / "status").write_text("Name:\tpython\nVmSize:\t  1048576 kB\nVmData:\t   524288 kB\n")
    (proc / "self" / "cgroup").write_text("0::/\n")
    monkeypatch.setattr(memory_probe, "PROC", proc)
    monkeypatch.setattr(memory_probe, "CGROUP_ROOT", cgroup)
    monkeypatch.setattr(memory_probe, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    return proc, cgroup


def test_item5_mem_available_not_the_physical_memory(machine):
    assert memory_probe.host_available() == memory_probe.Available(8 * GiB, "MemAvailable")


def test_item5_rlimit_as_minus_the_address_space_in_use(machine, monkeypatch):
    limits = {resource.RLIMIT_AS: 3 * GiB, resource.RLIMIT_DATA: resource.RLIM_INFINITY}
    monkeypatch.setattr(memory_probe, "getrlimit", lambda which: (limits[which], limits[which]))
    assert memory_probe.host_available() == memory_probe.Available(3 * GiB - 1 * GiB, "RLIMIT_AS")  # VmSize 1 GiB


def test_item5_cgroup_v2_the_tightest_ancestor_and_its_working_set(machine):
    proc, cgroup = machine
    (proc / "self" / "cgroup").write_text("0::/user/job\n")
    job, user = cgroup / "user" / "job", cgroup / "user"
    job.mkdir(parents=True)
    # the job: 6 GiB limit, 5 GiB used of which 2 GiB inactive file cache -> 3 GiB left
    (job / "memory.max").write_text(f"{6 * GiB}\n")
    (job / "memory.current").write_text(f"{5 * GiB}\n")
    (job / "memory.stat").write_text(f"anon {3 * GiB}\ninactive_file {2 * GiB}\n")
    # its parent: 4 GiB limit, 3.5 GiB used (a sibling's too), no cache -> 0.5 GiB left: the tightest
    (user / "memory.max").write_text(f"{4 * GiB}\n")
    (user / "memory.current").write_text(f"{7 * GiB // 2}\n")
    (cgroup / "memory.max").write_text("max\n")  # the root: no limit
    got = memory_probe.host_available()
    assert got.bytes == GiB // 2 and got.source == f"cgroup memory.max of {user}"


def test_item5_cgroup_v1_memory_controller(machine):
    proc, cgroup = machine
    (proc / "self" / "cgroup").write_text("5:cpu,cpuacct:/\n4:memory:/api/c1\n0::/\n")
    c1 = cgroup / "memory" / "api" / "c1"
    c1.mkdir(parents=True)
    (c1 / "memory.limit_in_bytes").write_text(f"{2 * GiB}\n")
    (c1 / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    (c1 / "memory.stat").write_text(f"cache 0\ninactive_file {GiB // 4}\n")
    (cgroup / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    got = memory_probe.host_available()
    assert got.bytes == 2 * GiB - 3 * GiB // 4 and got.source == f"cgroup memory.limit_in_bytes of {c1}"


PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from posbench.memory_probe import host_available
got = host_available()
print(got.bytes, got.source)
"""


def test_item5_a_real_rlimit_as_bounds_what_the_probe_reports():
    limit = 3 * GiB
    out = subprocess.run([sys.executable, "-c", PROBE, str(limit)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got, source = out.stdout.split(maxsplit=1)
    assert 0 < int(got) < limit, out.stdout  # under the limit, less the address space the interpreter holds
    assert source.strip() in ("RLIMIT_AS", "MemAvailable") or source.startswith("cgroup")
