"""The lab's verifiers: their shared client (lab_client.py) is importable
from every stage's directory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
