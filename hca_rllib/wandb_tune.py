"""Ray Tune's `WandbLoggerCallback` with this project's offline rule.

Ray's callback checks for an API key in `setup` unless the *environment* says
`WANDB_MODE=offline`; a `mode="offline"` argument alone is not enough, so a sweep with no
key (`--wandb auto`, offline by this project's rule) failed at setup with "No WandB API key
found". This subclass runs Ray's own `setup` with `WANDB_MODE=offline` set for that call
only when the callback itself is offline. Everything else is Ray's callback.

Kept in its own module because importing Ray's callback imports wandb (~0.2 s).
"""

from __future__ import annotations

import os

from ray.air.integrations.wandb import WandbLoggerCallback


class HCAWandbLoggerCallback(WandbLoggerCallback):
    def setup(self, *args, **kwargs):
        if self.kwargs.get("mode") != "offline":
            return super().setup(*args, **kwargs)
        before = os.environ.get("WANDB_MODE")
        os.environ["WANDB_MODE"] = "offline"
        try:
            return super().setup(*args, **kwargs)
        finally:
            if before is None:
                os.environ.pop("WANDB_MODE", None)
            else:
                os.environ["WANDB_MODE"] = before
