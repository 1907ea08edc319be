"""`rasa ...` without library deprecation warnings, for a person at a terminal (`make chat`).

Run with the Rasa venv's Python. PYTHONWARNINGS=ignore is not enough: importing Rasa's command
line drops the interpreter's warning filters, so the notices printed while it imports are held
back (and shown if the import fails), and the filter is set again before the command runs.
"""

import contextlib
import io
import sys
import warnings

held = io.StringIO()
try:
    with contextlib.redirect_stderr(held):
        from rasa.__main__ import main
except BaseException:
    sys.stderr.write(held.getvalue())
    raise
warnings.simplefilter("ignore")
# Loading a model imports more libraries under code that saves and restores the filters; what still
# gets past them is a library's notice, not the person's business.
warnings.showwarning = lambda *args, **kwargs: None
sys.argv[0] = "rasa"
main()
