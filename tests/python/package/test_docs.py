"""Numbers the documentation quotes from a benchmark run are that run's numbers.

The "Running on a cluster" vignette shows the across-hosts tables of bench/hosts.py (group 9
of ``make bench``: bandwidth, compression, held-out accuracy), and the site's Performance article (which the README's performance
section became) quotes a ratio of every benchmark; when a benchmark is run again and its results
file changes, this fails until the documentation says what the new run measured. (The
Performance article's charts, and its table of the runs with their day and machine, are drawn
from the results files when the site is built: its prose names no run's date.)
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


def test_performance_article_powersgd_table_is_the_benchmark_run():
    results = (ROOT / "bench" / "results-hosts.md").read_text()
    mlp = {tuple(row[:3]): row for row in table_rows(results, "| Link | Hosts | Arm |")}
    cnn = {tuple(row[:3]): row for row in table_rows(results, "| Link | Hosts | Arm (bench CNN)")}
    article = (ROOT / "vignettes" / "articles" / "performance.Rmd").read_text()
    shown = table_rows(article, "| Link, hosts | Wide MLP: powersgd")
    assert len(shown) == 5
    for where, speed, fp16, loss, cnn_speed in shown:
        link, hosts = where.split(" (")[0].split(", ")
        link = {"100 Mbit/s": "100mbit", "1 Gbit/s": "1gbit"}.get(link, link)
        run = mlp[(link, hosts, "powersgd")]
        assert (speed.strip("*"), loss) == (bold_ratio(run[5]), run[7].split(" ")[0])
        assert fp16 == bold_ratio(mlp[(link, hosts, "fp16")][5])
        assert cnn_speed == bold_ratio(cnn[(link, hosts, "powersgd")][5])


# --- the performance article (vignettes/articles/performance.Rmd) ------------------------------

def _bench(name: str) -> dict:
    import json

    return json.loads((ROOT / "bench" / name).read_text())


def _row_ratio(name: str, prefix: str) -> float:
    return next(r["ratio"] for r in _bench(name)["rows"] if r["benchmark"].startswith(prefix))


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def _arm_speed(job: str, arm: str) -> float:
    arms = _bench("results-hosts.json")["netbound"][job]["arms"]
    return _median([a / b for a, b in zip(arms["fp32"]["step_ms"], arms[arm]["step_ms"])])


def _overlap(job: str) -> float:
    rounds = _bench("results-overlap.json")["runs"][job]["per_round"]
    return _median([a / b for a, b in zip(rounds["one"], rounds["packs"])])


# The article's headline table, row by row (the start of its first cell): where each quoted
# ratio comes from. The two rows quoted from .md reports with no JSON are checked against them.
PERFORMANCE_ROWS = {
    "R-driven fit": lambda: [_row_ratio("results.json", "1.")],
    "Keras 3 `multi_worker_mirrored` (ours) vs legacy": lambda: [_row_ratio("results-scaling.json", "2.")],
    "Keras 3 vs legacy Keras, compute-heavier CNN": lambda: [_row_ratio("results-scaling.json", "7b.")],
    "Our parameter-server trainer": lambda: [_row_ratio("results.json", "3.")],
    "2 workers vs 1 process, each pinned": lambda: [_row_ratio("results-scaling.json", "4a.")],
    "2 workers vs 1 process, compute-heavier CNN": lambda: [_row_ratio("results-scaling.json", "7a.")],
    "the small CNN in blocks of 4": lambda: [_row_ratio("results-scaling.json", "8a.")],
    "the compute-heavier CNN in blocks of 4": lambda: [_row_ratio("results-scaling.json", "8b.")],
    "What blocks of 4 steps buy a 2-worker job": lambda: [_row_ratio("results-blocks.json", "8c.")],
    "`mirrored`, 2 logical CPUs": lambda: [_row_ratio("results.json", "4b.")],
    "Start-up, `launch()`": lambda: [_row_ratio("results.json", "5.")],
    "R generator": lambda: [_row_ratio("results-generator.json", "6a.")],
    "Keras' passes over the data under `mirrored`": lambda: [_row_ratio("results-passes.json",
                                                                        "14a.")],
    "Backups every 10 steps": lambda: [_bench("results-healing.json")["ratios"]["save_freq=10 / none"]],
    "Kill to training again": lambda: [_bench("results-healing.json")["ratios"]["recovery / startup"]],
    "A watched launched job": lambda: [_bench("results-watching.json")["ratios"]["watched / unwatched"]],
    "Building and compiling a small CNN": lambda: [float(re.search(
        r"Ratio \(R values / plain\), median of the rounds: \*\*([\d.]+)\*\*",
        (ROOT / "bench" / "results-rvalues.md").read_text()).group(1))],
    "`gradient_compression=\"fp16\"` vs 32 bits": lambda: [_arm_speed("100mbit/2", "fp16")],
    "the same on 4 hosts": lambda: [_arm_speed("100mbit/4", "fp16")],
    "`gradient_compression=\"powersgd\"`": lambda: [_arm_speed("100mbit/2", "powersgd")],
    "Packs (the default": lambda: [_overlap("conv_head/100mbit/2")],
    "2 workers vs 1 process, small CNN / compute-heavier CNN, after the compression code":
        lambda: [_row_ratio("results-compression-off.json", "4a."),
                 _row_ratio("results-compression-off.json", "7a.")],
    "The ring model fitted on 2 hosts": lambda: [float(re.search(
        r"\| 100mbit \| 10\.6 MB \| [\d,.]+ \| ([\d,.]+) \| ([\d,.]+) \|",
        (ROOT / "bench" / "results-hosts.md").read_text()).group(2).replace(",", "")) / float(
        re.search(r"\| 100mbit \| 10\.6 MB \| [\d,.]+ \| ([\d,.]+) \|",
                  (ROOT / "bench" / "results-hosts.md").read_text()).group(1).replace(",", ""))],
}


def test_performance_article_quotes_the_benchmark_runs():
    article = (ROOT / "vignettes" / "articles" / "performance.Rmd").read_text()
    rows = [line for line in article.splitlines() if line.startswith("| ")][1:]
    rows = rows[:rows.index(next(r for r in rows if r.startswith("| Link, hosts")))]
    assert len(rows) == len(PERFORMANCE_ROWS), [r[:40] for r in rows]
    for key, source in PERFORMANCE_ROWS.items():
        row = next((r for r in rows if r[2:].startswith(key) or key in r), None)
        assert row is not None, f"no row starts with {key!r}"
        quoted = re.search(r"\*\*([\d.]+(?: / [\d.]+)*)\*\*", row).group(1).split(" / ")
        measured = source()
        for shown, value in zip(quoted, measured, strict=True):
            digits = len(shown.split(".")[1])
            assert shown == f"{value:.{digits}f}", (key, shown, value)


def test_performance_article_compression_table_is_the_benchmark_run():
    article = (ROOT / "vignettes" / "articles" / "performance.Rmd").read_text()
    rows = table_rows(article, "| Link, hosts | Examples/s")
    assert len(rows) == 5, rows
    for link_hosts, packs, fp16, bf16, powersgd, _ in rows:
        link, hosts = link_hosts.split(", ", 1)
        link = {"100 Mbit/s": "100mbit", "1 Gbit/s": "1gbit"}.get(link, link)
        job = link + "/" + hosts.split()[0]
        for shown, arm in ((packs, "packs"), (bold_ratio(fp16), "fp16"), (bf16, "bf16"),
                           (powersgd, "powersgd")):
            assert shown == f"{_arm_speed(job, arm):.2f}", (link_hosts, arm, shown)



def test_performance_article_elastic_paragraph_is_the_benchmark_run():
    runs = _bench("results-elastic.json")["runs"]
    plain = [r["kill_to_training_s"] for r in runs["plain"]]
    elastic = runs["elastic"]

    def median_of(key):
        return _median([r[key] for r in elastic])

    def ratio_of(key):
        return _median([r[key] / p for r, p in zip(elastic, plain)])

    article = (ROOT / "vignettes" / "articles" / "performance.Rmd").read_text()
    paragraph = article[article.index("A host lost for good, and back"):]
    paragraph = paragraph[:paragraph.index("```")]
    quoted = [float(v) for v in re.findall(r"\*\*([\d.]+)\*\* s", paragraph)]
    assert quoted == [round(v, 1) for v in (
        median_of("loss_to_training_s"), median_of("beyond_grace_s"), _median(plain),
        median_of("back_to_training_s"), median_of("grow_restart_s"))], quoted
    ratios = [float(v) for v in re.findall(r"([\d.]+)x a\s+plain restart", paragraph)]
    assert ratios == [round(ratio_of("beyond_grace_s"), 2), round(ratio_of("grow_restart_s"), 2)]
    assert all(r["steps_redone_at_grow"] == 0 for r in elastic)


def test_performance_article_names_its_runs_in_one_place():
    """The article states each figure as the current result, not as a diary of dated runs: its
    prose holds no date, and the table of runs (the ``runs`` chunk, drawn from the results
    files when the site is built) names every results file the article quotes, with the day
    and machine the file records."""
    article = (ROOT / "vignettes" / "articles" / "performance.Rmd").read_text()
    prose = re.sub(r"^```.*?^```", "", article, flags=re.M | re.S)
    assert not re.findall(r"20\d\d-\d\d-\d\d", prose), "dated runs in the Performance article"
    assert "`r day(" not in prose
    runs = re.search(r"^```\{r runs\}\n(.*?)^```", article, re.M | re.S).group(1)
    for results in sorted((ROOT / "bench").glob("results*.json")):
        if results.stem.endswith("-quick"):   # a smoke test's run: not quoted
            continue
        assert f'"{results.name}"' in runs, f"{results.name} is not in the table of runs"
    assert '"results-rvalues.md"' in runs
