"""`make bench`: what the bridge costs, and how far it is from the floor (see `python -m tests.bench -h`).

The benchmarks measure the example bot: its CRM package (examples/crm_bot/crm) is imported by name,
as its action server imports it, so its folder goes on the path here (pytest does the same through
its `pythonpath` setting).
"""

import sys
from pathlib import Path

_EXAMPLE_BOT = str(Path(__file__).resolve().parents[2] / "examples" / "crm_bot")
if _EXAMPLE_BOT not in sys.path:
    sys.path.append(_EXAMPLE_BOT)
