"""Worker processes that leave when the process they serve is gone.

Loader workers and l3convert's pool processes start from a forkserver, so they are the
forkserver's children, not the training or converting process's: a check of the parent (what
torch's DataLoader workers do) misses that process being killed outright (SIGKILL, the OOM
killer), and the workers would stay behind, holding memory. Each watches its owner instead.
"""

from __future__ import annotations

import os
import threading
import time


def exit_when_gone(pid: int, interval: float = 1.0) -> None:
    """Poll pid every interval seconds; end this process at once when it no longer exists."""
    while True:
        time.sleep(interval)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # alive, as another user: cannot be ours, but it exists
            pass


def watch_owner(pid: int, name: str = "owner-watch") -> None:
    """Run exit_when_gone(pid) in a daemon thread of this process."""
    threading.Thread(target=exit_when_gone, args=(pid,), daemon=True, name=name).start()
