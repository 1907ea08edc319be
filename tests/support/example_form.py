"""The example bot's form module (actions/forms.py) on its own.

Importing it as ``actions.forms`` would run ``actions/__init__.py``, which registers the CRM tools as
the process's local tools; tests of the form's own logic need none of that.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support.procs import EXAMPLE_BOT


def load_form() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_bot_forms", EXAMPLE_BOT / "actions" / "forms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
