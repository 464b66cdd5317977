"""Numbers the documentation quotes from a benchmark run are that run's numbers.

The "Running on a cluster" vignette shows the across-hosts bandwidth table of bench/hosts.py
(group 9 of ``make bench``); when the benchmark is run again and its results file changes, this
fails until the vignette says what the new run measured.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_vignette_bandwidth_table_is_the_benchmark_run():
    results = (ROOT / "bench" / "results-hosts.md").read_text()
    measured = {row[0]: row for row in table_rows(results, "| Link | Runs | Step (ms)")}
    vignette = (ROOT / "vignettes" / "running-on-a-cluster.Rmd").read_text()
    shown = table_rows(vignette, "| Link | Step (ms)")
    assert [row[0] for row in shown] == list(measured)
    for link, step, ratio, share in shown:
        run = measured[link]
        # Runs, step, "**ratio** (per round)", all-reduce ms, share...
        assert (step, ratio, share) == (run[2], re.sub(r"\*\*([\d.]+)\*\*.*", r"\1", run[3]), run[5])
    date = re.search(r"Date: (\d{4}-\d\d-\d\d)", results).group(1)
    assert f"({date}, " in vignette


def test_vignette_compression_table_is_the_benchmark_run():
    results = (ROOT / "bench" / "results-hosts.md").read_text()
    measured = {tuple(row[:3]): row for row in table_rows(results, "| Link | Hosts | Arm |")}
    vignette = (ROOT / "vignettes" / "running-on-a-cluster.Rmd").read_text()
    shown = table_rows(vignette, "| Link | Hosts | Gradients |")
    assert [tuple(row[:3]) for row in shown] == list(measured)
    for link, hosts, arm, step, speed, loss in shown:
        run = measured[(link, hosts, arm)]
        # Step, examples/s, "**speed-up** (per round)", loss, "loss ratio (per round)"
        assert (step, speed, loss) == (run[3], re.sub(r"\*\*([\d.]+)\*\*.*", r"\1", run[5]),
                                       run[7].split(" ")[0])


def test_vignette_overlap_table_is_the_benchmark_run():
    results = (ROOT / "bench" / "results-overlap.md").read_text()
    measured = {tuple(row[:3]): row for row in table_rows(results, "| Model | Link | Inter-op")}
    vignette = (ROOT / "vignettes" / "running-on-a-cluster.Rmd").read_text()
    shown = table_rows(vignette, "| Model | Link | Inter-op threads |")
    assert [tuple(row[:3]) for row in shown] == list(measured)
    for model, link, threads, one, packs, speed in shown:
        run = measured[(model, link, threads)]
        # ..., one all-reduce step, overlap, packs, packs step, overlap, "**speed** (rounds)"
        assert (one, packs, speed) == (run[8], run[11],
                                       re.sub(r"\*\*([\d.]+)\*\*.*", r"\1", run[13]))
