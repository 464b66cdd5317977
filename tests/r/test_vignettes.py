"""Every vignette renders, for real, as an article of the documentation site, with the computed
output a reader expects.

The articles are knitted once per session, each in a fresh R process, then made pages by
pkgdown, as `make docs` does (scripts/docsite.py, through the ``site_render`` fixture of
tests/python/support/sitefixtures.py); a chunk error fails the knit and so the test. The
browser tier (tests/docs/) checks the same render as a site, and
tests/r/test_r_source_package.py the R package built from the same knitted tutorials.
"""

from __future__ import annotations

import html
import re

import pytest

from rsupport import ROOT

# The same xdist group as tests/docs/test_site.py: one worker holds the session's one render.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(2400), pytest.mark.xdist_group("site")]
VIGNETTES = sorted(p.stem for p in (ROOT / "vignettes").glob("*.Rmd"))
# A plot of the page: pkgdown writes each as a PNG file beside the article.
FIGURE = "_files/figure-html/"

EXPECTED = {
    # keras3 layers made outside any scope, compiled inside one, are named before Keras runs.
    "getting-started": ["replicas in sync: 2", "Did you mean 'mirrored'?", FIGURE,
                        "The model's weights were made in no strategy scope, yet it is used "
                        "inside the 'mirrored' strategy's scope",
                        "use 62 (= global_batch_size(31, strategy)) or 64", "central_storage"],
    # One progress line per epoch for the job (not each worker's Keras lines), its history
    # plotted and its per-worker table.
    "multi-worker": ["[tfdistributed] epoch 5/5", FIGURE, "examples_per_second",
                     "Set the shard policy to 'data'",
                     "Task worker 1 was killed by signal 9", "epochs run here: 3 4 5",
                     'TF_CONFIG["task"]["index"] = 3 is out of range',
                     '{"cluster": {"chief": ["cmle-training-master-0:2222"]',
                     "[tfdistributed] worker 0 has waited", ": connection refused: nothing listens",
                     "worker 0 gave up joining the job after 15 s",
                     "worker 0: 2 replicas, loss", "worker 1: 2 replicas, loss",
                     "worker 0 waits in step 7 for another task. worker 1 has not begun step 7 "
                     "(its last was 6): it is in a callback or in the code between two steps, at "
                     "a callback's on_train_batch_end, in R code", "StallError: no step for",
                     # Hosts that come and go: a host lost for good, the job on 2, then 3 again.
                     "is gone (10.77.0.4: its network is down", "the job goes on with 2 worker(s)",
                     "answers again: the job grows to 3 worker(s)", " - 2 of 3 workers",
                     "from attempt 2: 2 of 3 workers (lost: 10.77.0.4)"],
    "parameter-server": ["coordinator: test accuracy", FIGURE,
                         "/job:ps/replica:0/task:0",
                         "/job:ps/replica:0/task:1", "<tfdistributed strategy: parameter_server>"],
    "custom-training-loops": ["mirrored_2_replicas", "epoch 3: mean loss"],
    "callbacks-checkpoints": ["epoch-12.weights.h5", "events.out.tfevents", FIGURE],
    "data-bigger-than-memory": ["[worker 1] worker 1 of 2 reads part-00001-of-00004.csv",
                                FIGURE, "examples/s",
                                "failed on call 12 (after 11 batches): the network drive went away",
                                "Batch 3 does not match the first batch", "needs `steps_per_epoch`",
                                "Pass dataset_from_generator(<your function>) instead",
                                "write the data as at least 5 files"],
    "running-on-a-cluster": ["1   idle", '"task": {"type": "worker", "index": 1}',
                             "h1 idle 10.77.0.3",
                             '1: {"cluster": {"worker": ["10.77.0.2:',
                             "1: multi_worker_mirrored 1 of 2: test accuracy",
                             "#SBATCH --gpus-per-task=1", "[launch] submitted SLURM job",
                             "[worker 1] multi_worker_mirrored 1 of 2: test accuracy",
                             "Task worker 1 exited with status 1 (SLURM job",
                             "out of memory on this node", "kind: TFJob",
                             FIGURE, "examples_per_second"],
}


def text_of(page: str) -> str:
    page = re.sub(r"<script.*?</script>|<style.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<(?!img)[^>]+>", "", page))


def errors_in(text: str) -> list:
    """The lines of a page's text that report an error (R's, a task's), to show on a miss."""
    return [line for line in text.splitlines()
            if re.search(r"Error|^#> ! |Traceback|Execution halted", line)]


def test_every_vignette_is_checked():
    assert VIGNETTES == sorted(EXPECTED)


def test_no_chunk_is_skipped_except_installation():
    for name in VIGNETTES:
        source = (ROOT / "vignettes" / f"{name}.Rmd").read_text()
        skipped = re.findall(r"```\{r ([\w-]+)[^}]*eval\s*=\s*FALSE", source)
        assert skipped in ([], ["install"]), (name, skipped)


@pytest.fixture(scope="module")
def rendered(site_render):
    pages = {name: site_render.article(name).read_text() for name in VIGNETTES
             if name not in site_render.failures and site_render.article(name).exists()}
    return pages, site_render.failures


@pytest.mark.parametrize("name", VIGNETTES)
def test_vignette_renders_with_its_results(rendered, name):
    pages, failures = rendered
    assert name not in failures, failures.get(name)
    assert name in pages, f"{name}.Rmd rendered no page"
    text = text_of(pages[name])
    for expected in EXPECTED[name]:
        # A miss shows the page's errors: what a chunk said instead (CI keeps no page).
        assert expected in text or expected in pages[name], (name, expected, errors_in(text))


@pytest.mark.parametrize("name", VIGNETTES)
def test_plots_are_drawn_beside_their_article(site_render, name):
    page = site_render.article(name).read_text()
    figures = re.findall(r'<img src="([^"]*' + re.escape(FIGURE) + r'[^"]+)"', page)
    for src in figures:
        assert (site_render.dest / "articles" / src).stat().st_size > 1000, src


def test_getting_started_opens_with_the_readme_quick_start(rendered):
    text = text_of(rendered[0]["getting-started"])
    quick = text[text.index("In 30 seconds"):text.index("One machine, several replicas")]
    assert FIGURE in quick or "<img" in quick
    # keras3's evaluate(): a named list.
    accuracy = float(re.search(r"#> \$accuracy\s*#> \[1\] ([\d.]+)", quick).group(1))
    assert accuracy >= 0.9, quick


def test_healing_timeline_resumes_from_the_last_backup(rendered):
    text = text_of(rendered[0]["multi-worker"])
    assert "multi-worker_files/figure-html/heal-timeline-1.png" in rendered[0]["multi-worker"]
    killed, resumed, redone = map(int, re.search(
        r"killed_at\s+resumed_at\s+steps_redone\s*#>\s+(\d+)\s+(\d+)\s+(\d+)", text).groups())
    # Backups every 5 steps: the restart resumed at the last one before the kill.
    assert resumed % 5 == 0 and 0 <= killed - resumed <= 5 and redone == killed - resumed


def test_accuracies_in_the_tutorials(rendered):
    pages, _ = rendered
    start = text_of(pages["getting-started"])
    table = re.findall(r"#>\s+\d+\s+(default|one_device|mirrored|central_storage)\s+\d\s+([\d.]+)", start)
    assert len(table) == 4 and all(float(acc) >= 0.9 for _, acc in table), table
    ps_page = text_of(pages["parameter-server"])
    coordinator = float(re.search(r"coordinator: test accuracy ([\d.]+)", ps_page).group(1))
    assert coordinator >= 0.9
    # The same weights in a plain single-process model evaluate to the same accuracy (keras3's
    # evaluate(): a named list).
    plain = float(re.search(r"#> \$accuracy\s*#> \[1\] ([\d.]+)", ps_page).group(1))
    assert plain == pytest.approx(coordinator, abs=5e-4)
    loops = re.search(r"max\(abs\(two\$losses - one\$losses\)\)\s*#> \[1\] ([\d.e+-]+)",
                      text_of(pages["custom-training-loops"]))
    assert float(loops.group(1)) < 1e-4


def test_model_saved_under_mirrored_evaluates_the_same_with_and_without_a_strategy(rendered):
    pages, _ = rendered
    text = text_of(pages["callbacks-checkpoints"])
    rows = dict(re.findall(r"#> (trained|plain|mirrored)\s+([\d.]+)\s+[\d.]+", text))
    assert set(rows) == {"trained", "plain", "mirrored"}
    assert len(set(rows.values())) == 1, rows
    assert float(rows["trained"]) >= 0.9


def test_generator_tutorial_trains_to_090_and_its_workers_agree(rendered):
    pages, _ = rendered
    text = text_of(pages["data-bigger-than-memory"])
    # evaluate_distributed()'s named vectors, then keras3's evaluate() list (TFRecord files).
    accuracies = [float(a or b) for a, b in re.findall(
        r"#>\s+accuracy\s+loss\s*#>\s+([\d.]+)|#> \$accuracy\s*#> \[1\] ([\d.]+)", text)]
    assert len(accuracies) == 4 and all(a >= 0.9 for a in accuracies), accuracies
    # Under mirrored, the generator with `steps` evaluates exactly the test arrays.
    assert accuracies[1] == accuracies[2], accuracies
    workers = dict(re.findall(r"\[worker (\d)\] worker \d: test accuracy ([\d.]+, sum of weights "
                              r"[\d.-]+)", text))
    assert set(workers) == {"0", "1"} and workers["0"] == workers["1"], workers
    assert float(workers["0"].split(",")[0]) >= 0.9


def test_cluster_tutorial_trains_in_lock_step_on_every_engine(rendered):
    text = text_of(rendered[0]["running-on-a-cluster"])
    # srun on two nodes, sbatch and Ray: each 2-worker job ends with identical weights on both
    # workers.
    assert text.count("same_weights(out)\n#> [1] TRUE") == 3
    accuracies = [float(a) for a in re.findall(r"multi_worker_mirrored 0 of 2: test accuracy ([\d.]+)", text)]
    # srun, sbatch and Ray, then the same script with PowerSGD on 2 workers of this computer
    # (176 steps of a tiny model, 20 of them in 32 bits: a few points lower, said on the page).
    assert len(accuracies) == 4 and all(a >= 0.8 for a in accuracies[:3]), accuracies
    assert accuracies[3] >= 0.7, accuracies
    assert "same_weights(low_rank_dir)\n#> [1] TRUE" in text
