"""Reads a benchmark CSV written by tools/bench.py: '# key=value' header lines, then the rows.

Shared by plots/plot.py and tools/gen_docs.py, so the two always read a results file the same way.
"""
import csv


def number(text):
    """A CSV cell as a float, or None for an empty, non-numeric or NaN cell."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def read_results_csv(path):
    """(meta: {key: value} from the '# key=value' lines (first one wins), rows: [dict])."""
    meta, lines = {}, []
    with open(path, newline="", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                text = line[1:].strip()
                if "=" in text:
                    key, value = text.split("=", 1)
                    meta.setdefault(key.strip(), value.strip())
            elif line.strip():
                lines.append(line)
    return meta, list(csv.DictReader(lines))
