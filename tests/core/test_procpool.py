"""Worker processes of studies and sweeps (procpool.run_jobs) die with the process that started them."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def children_of(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
def test_workers_exit_when_the_parent_is_killed(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(SRC)!r})
        from pathlib import Path
        from posbench.procpool import run_jobs
        if __name__ == "__main__":
            run_jobs(time.sleep, {{"a": (600,), "b": (600,)}}, 2, Path({str(tmp_path / 'logs')!r}))
    """)
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")])
    try:
        deadline = time.monotonic() + 60
        workers = []
        while time.monotonic() < deadline:
            # the pool's workers (its resource tracker is a child too, but it exits on its own)
            workers = [p for p in children_of(parent.pid)
                       if "spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
                       and "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
            if len(workers) == 2:
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the pool never started its two workers"
        time.sleep(1.0)  # the workers are inside their 600 s job now
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(alive(w) for w in workers):
            time.sleep(0.2)
        assert not any(alive(w) for w in workers), "workers outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
