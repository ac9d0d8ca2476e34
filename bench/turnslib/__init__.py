"""bench/turns.py in parts: `run` (the command line), `workloads`, `turn`, `server`, `config`, `stats`, `report`."""
