"""Numbers the documentation quotes from a benchmark run are that run's numbers.

The "Running on a cluster" vignette shows the across-hosts tables of bench/hosts.py (group 9 of
``make bench``: bandwidth, compression, held-out accuracy), and README its PowerSGD table; when
the benchmark is run again and its results file changes, this fails until the vignette and
README say what the new run measured.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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


def bold_ratio(cell: str) -> str:
    """The ratio of a results cell ``**1.16** (1.17, 1.15, 1.16)``: ``1.16``."""
    return re.sub(r"\*\*([\d.]+)\*\*.*", r"\1", cell)


def vignette_table(results_file: str, measured_header: str, shown_header: str, keys: int):
    """The cluster vignette's table (``shown_header``) and the results file's rows by their
    first ``keys`` cells, after checking that the vignette shows the same rows in order."""
    results = (ROOT / "bench" / results_file).read_text()
    measured = {tuple(row[:keys]): row for row in table_rows(results, measured_header)}
    vignette = (ROOT / "vignettes" / "running-on-a-cluster.Rmd").read_text()
    shown = table_rows(vignette, shown_header)
    assert [tuple(row[:keys]) for row in shown] == list(measured)
    return shown, measured, results, vignette


def test_vignette_bandwidth_table_is_the_benchmark_run():
    shown, measured, results, vignette = vignette_table(
        "results-hosts.md", "| Link | Runs | Step (ms)", "| Link | Step (ms)", keys=1)
    for link, step, ratio, share in shown:
        run = measured[(link,)]
        # Runs, step, "**ratio** (per round)", all-reduce ms, share...
        assert (step, ratio, share) == (run[2], bold_ratio(run[3]), run[5])
    date = re.search(r"Date: (\d{4}-\d\d-\d\d)", results).group(1)
    assert f"({date}, " in vignette


def test_vignette_compression_table_is_the_benchmark_run():
    shown, measured, _, _ = vignette_table(
        "results-hosts.md", "| Link | Hosts | Arm |", "| Link | Hosts | Gradients |", keys=3)
    for link, hosts, arm, step, speed, loss in shown:
        run = measured[(link, hosts, arm)]
        # Step, examples/s, "**speed-up** (per round)", loss, "loss ratio (per round)"
        assert (step, speed, loss) == (run[3], bold_ratio(run[5]), run[7].split(" ")[0])


def test_vignette_overlap_table_is_the_benchmark_run():
    shown, measured, _, _ = vignette_table(
        "results-overlap.md", "| Model | Link | Inter-op", "| Model | Link | Inter-op threads |",
        keys=3)
    for model, link, threads, one, packs, speed in shown:
        run = measured[(model, link, threads)]
        # ..., one all-reduce step, overlap, packs, packs step, overlap, "**speed** (rounds)"
        assert (one, packs, speed) == (run[8], run[11], bold_ratio(run[13]))


def test_vignette_accuracy_table_is_the_benchmark_run():
    shown, measured, _, _ = vignette_table(
        "results-hosts.md", "| Model | Gradients | Held-out accuracy | vs 32 bits | Held-out loss",
        "| Model | Gradients | Held-out accuracy |", keys=2)
    for model, arm, accuracy, gap in shown:
        assert (accuracy, gap) == tuple(measured[(model, arm)][2:4])


def test_readme_powersgd_table_is_the_benchmark_run():
    results = (ROOT / "bench" / "results-hosts.md").read_text()
    mlp = {tuple(row[:3]): row for row in table_rows(results, "| Link | Hosts | Arm |")}
    cnn = {tuple(row[:3]): row for row in table_rows(results, "| Link | Hosts | Arm (bench CNN)")}
    readme = (ROOT / "README.md").read_text()
    shown = table_rows(readme, "| Link, hosts | Wide MLP: powersgd")
    assert len(shown) == 5
    for where, speed, fp16, loss, cnn_speed in shown:
        link, hosts = where.split(" (")[0].split(", ")
        link = {"100 Mbit/s": "100mbit", "1 Gbit/s": "1gbit"}.get(link, link)
        run = mlp[(link, hosts, "powersgd")]
        assert (speed.strip("*"), loss) == (bold_ratio(run[5]), run[7].split(" ")[0])
        assert fp16 == bold_ratio(mlp[(link, hosts, "fp16")][5])
        assert cnn_speed == bold_ratio(cnn[(link, hosts, "powersgd")][5])
