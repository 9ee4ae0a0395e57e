"""The verdicts of a benchmark: every figure with its target, one table, an exit code.

Each bench/*.py judges its figures through one `Judge`: `check` records a
figure against its target (and whether it met it), `note` a figure without a
target. `finish` prints the table of everything judged and exits 1 when any
target was missed, so a benchmark that misses cannot pass quietly. Where
FLOW_BENCH_RESULTS names a file, the rows are also appended to it as JSON
lines, for bench/all's summary.
"""

import json
import os
import sys


class Judge:
    """The figures one benchmark judged."""

    def __init__(self, bench):
        self.bench = bench
        self.rows = []

    def check(self, figure, value, target, ok):
        """Records `figure` (already formatted `value`) against `target` (text)."""
        self.rows.append({"bench": self.bench, "figure": figure, "value": value,
                          "target": target, "verdict": "PASS" if ok else "FAIL"})
        return ok

    def at_most(self, figure, value, limit, fmt="{:.3f}", unit=""):
        """`value <= limit`."""
        return self.check(figure, fmt.format(value) + unit, f"<= {fmt.format(limit)}{unit}", value <= limit)

    def below(self, figure, value, limit, fmt="{:.3f}", unit=""):
        """`value < limit`."""
        return self.check(figure, fmt.format(value) + unit, f"< {fmt.format(limit)}{unit}", value < limit)

    def at_least(self, figure, value, limit, fmt="{:.3f}", unit=""):
        """`value >= limit`."""
        return self.check(figure, fmt.format(value) + unit, f">= {fmt.format(limit)}{unit}", value >= limit)

    def note(self, figure, value):
        """A figure printed with the verdicts but judged against nothing."""
        self.rows.append({"bench": self.bench, "figure": figure, "value": value,
                          "target": "-", "verdict": "-"})

    def failed(self):
        """The rows whose target was missed."""
        return [r for r in self.rows if r["verdict"] == "FAIL"]

    def finish(self):
        """Prints the table, records it for bench/all, exits 1 if a target was missed."""
        print()
        print(table(self.rows, f"{self.bench}: what was judged"))
        path = os.environ.get("FLOW_BENCH_RESULTS")
        if path:
            with open(path, "a") as out:
                for row in self.rows:
                    out.write(json.dumps(row) + "\n")
        missed = self.failed()
        if not self.rows:
            print(f"{self.bench}: nothing was judged", file=sys.stderr)
            sys.exit(1)
        if missed:
            names = ", ".join(r["figure"] for r in missed)
            print(f"{self.bench}: TARGET MISSED: {names}", file=sys.stderr)
            sys.exit(1)


def table(rows, title):
    """Rows as an aligned text table under `title`."""
    heads = ("figure", "value", "target", "verdict")
    cells = [[str(r[h]) for h in heads] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    line = "  ".join("{:<%d}" % w for w in widths)
    out = [title, line.format(*heads), line.format(*("-" * w for w in widths))]
    out += [line.format(*c) for c in cells]
    return "\n".join(l.rstrip() for l in out)
