"""`manage.py usage`: what model calls cost, from the ledger, by agent, person or model."""
from __future__ import annotations

import json
from datetime import date

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from sessions.models.spend import utc_day
from sessions.spend.report import BY, spending, total


class Command(BaseCommand):
    help = "Print what model calls cost (US dollars) and their tokens, by agent, person or model."

    def add_arguments(self, parser):
        parser.add_argument("--since", help="the first UTC day counted, YYYY-MM-DD (default: this month's first)")
        parser.add_argument("--by", choices=sorted(BY), default="agent")
        parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")

    def handle(self, *args, since, by, json: bool, **options):
        try:
            first = date.fromisoformat(since) if since else utc_day().replace(day=1)
        except ValueError:
            raise CommandError(f"--since {since!r} is not a day: write it as YYYY-MM-DD, e.g. 2026-12-01") from None
        migrate_if_needed()
        lines = spending(first, by)
        summed = total(lines)
        if json:
            self.stdout.write(_json({"since": first.isoformat(), "by": by, "rows": [line.as_dict() for _, line in lines],
                                     "total": summed.as_dict()}))
            return
        self.stdout.write(f"Spending since {first.isoformat()} (UTC) by {by}; unpriced calls add no dollars.")
        header = (by, "cost $", "unpriced", "input", "output", "cache read", "cache write")
        table = [header] + [_cells(line) for _, line in lines] + [_cells(summed)]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for n, row in enumerate(table):
            if n == len(table) - 1:
                self.stdout.write("  ".join("-" * w for w in widths))
            self.stdout.write("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                        for i, (cell, w) in enumerate(zip(row, widths))))


def _cells(line) -> tuple[str, ...]:
    return (line.key, f"{line.cost_usd:.4f}", str(line.unpriced_calls),
            *(f"{line.tokens[k]:,}" for k in ("input", "output", "cacheRead", "cacheWrite")))


def _json(value) -> str:
    return json.dumps(value, indent=2)
