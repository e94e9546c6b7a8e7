"""Waiting in tests for something another process does (a checkpoint written, a line
logged): one helper for the waits that need nothing else. The waits that also stop when
the child process died (tests/test_disk_full.py, test_cluster.py, test_atari_long.py)
poll in their own loops."""

import time
from typing import Callable


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Whether `predicate()` came true within `timeout` seconds, asked every `interval`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
