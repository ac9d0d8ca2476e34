"""bench/turns.py in parts: `run` (the command line), `workloads`, `turn`, `server`, `config`, `stats`, `report`."""
import sys
from pathlib import Path

# The repository, for agents.serving (server.py): the scripts run with only bench/ on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
