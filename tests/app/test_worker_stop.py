"""The worker's SIGTERM handler (the page's Stop): `background.stop` signals the run's processes every 0.1 s until
they are gone, so the worker is signalled again while it shuts down; the handler unwinds it once and then lets it
finish, never raising inside the interpreter's exit callbacks."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a worker stopped mid-study that is signalled again while an exit callback runs (the process pool's own join)
SCRIPT = """
import atexit, os, signal, time
from posbench.app import worker

def pool_join_at_exit():
    os.kill(os.getpid(), signal.SIGTERM)  # stop() signalling again
    time.sleep(0.2)
    print("exit callback finished", flush=True)

atexit.register(pool_join_at_exit)
signal.signal(signal.SIGTERM, worker._stop)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("not reached", flush=True)
"""


def test_a_stop_during_shutdown_leaves_no_exception_in_the_exit_callbacks():
    """Item 6: Stop left "Exception ignored in atexit callback ... SystemExit: 143" in runner.log."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 143, (done.returncode, done.stderr)  # 128 + SIGTERM: ended by the Stop
    assert "Exception ignored" not in done.stderr and "SystemExit" not in done.stderr, done.stderr
    assert done.stdout.splitlines() == ["exit callback finished"]  # unwound at once, then exited cleanly
