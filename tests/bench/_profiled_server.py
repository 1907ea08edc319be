"""`python tests/bench/_profiled_server.py OUT [crm arguments]`: `python -m crm ...` under cProfile.

The CPU clock is profiled from SIGUSR1 on (so start-up is left out) until the process ends on
SIGTERM or SIGINT, when the profile is written to OUT.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
import time
from pathlib import Path
from types import FrameType

# crm/ is the example bot's package, not installed with the plugin.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "crm_bot"))


def main() -> None:
    out = sys.argv[1]
    sys.argv = ["crm", *sys.argv[2:]]
    profiler = cProfile.Profile(time.process_time)

    def start(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    signal.signal(signal.SIGUSR1, start)
    try:
        runpy.run_module("crm", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
