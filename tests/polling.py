"""Waiting in tests for something another process does (a checkpoint written, a line
logged): one helper, so every test polls alike."""

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
