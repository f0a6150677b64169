"""Makes ``from tests.modelzoo import ...`` work from every test folder, and keeps
PoCL from oversubscribing CI's two cores."""

import os
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# pytest -n 2 already runs one process per core; PoCL would add a thread per core in each,
# starving the verifier's wall-clock Z3 budgets in the other worker.
os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", "1")
