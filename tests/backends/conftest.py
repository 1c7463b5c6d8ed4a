"""Backend tests share the agent tests' helpers (real pods, event sink, bounded waits)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
