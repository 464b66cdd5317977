"""Every vignette renders to HTML, for real, with the computed output a reader expects.

Each vignette is knitted by scripts/render_vignette.R in a fresh Rscript process (the way
`make docs` does it); a chunk error fails the render and so the test.
"""

from __future__ import annotations

import concurrent.futures
import html
import re
import subprocess

import pytest

from rsupport import ROOT, r_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
VIGNETTES = sorted(p.stem for p in (ROOT / "vignettes").glob("*.Rmd"))

EXPECTED = {
    "getting-started": ["replicas in sync: 2", "Did you mean 'mirrored'?", "data:image/png;base64",
                        "`units` of keras.layers.Dense must be a single whole number >= 1, got 64.5",
                        "central_storage"],
    # One progress line per epoch for the job (not each worker's Keras lines), its history
    # plotted and its per-worker table.
    "multi-worker": ["[tfdistributed] epoch 5/5", "data:image/png;base64", "examples_per_second",
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
    "parameter-server": ["coordinator: test accuracy", "data:image/png;base64",
                         "/job:ps/replica:0/task:0",
                         "/job:ps/replica:0/task:1", "<tfdistributed strategy: parameter_server>"],
    "custom-training-loops": ["mirrored_2_replicas", "epoch 3: mean loss"],
    "callbacks-checkpoints": ["epoch-12.weights.h5", "events.out.tfevents", "data:image/png;base64"],
    "data-bigger-than-memory": ["[worker 1] worker 1 of 2 reads part-00001-of-00004.csv",
                                "data:image/png;base64", "examples/s",
                                "failed on call 12 (after 11 batches): the network drive went away",
                                "Batch 3 does not match the first batch", "needs `steps_per_epoch`",
                                "Pass dataset_from_generator(<your function>) instead",
                                "write the data as at least 5 files"],
    "running-on-a-cluster": ["1   idle", '"task": {"type": "worker", "index": 1}',
                             "h1 idle 10.77.0.3",
                             '1: {"cluster": {"worker": ["10.77.0.2:',
                             "1: multi_worker_mirrored 1 of 2: test accuracy",
                             "#SBATCH --gres=gpu:1", "[launch] submitted SLURM job",
                             "[worker 1] multi_worker_mirrored 1 of 2: test accuracy",
                             "Task worker 1 exited with status 1 (SLURM job",
                             "out of memory on this node", "kind: TFJob",
                             "data:image/png;base64", "examples_per_second"],
}


def text_of(page: str) -> str:
    page = re.sub(r"<script.*?</script>|<style.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<(?!img)[^>]+>", "", page))


def test_every_vignette_is_checked():
    assert VIGNETTES == sorted(EXPECTED)


def test_no_chunk_is_skipped_except_installation():
    for name in VIGNETTES:
        source = (ROOT / "vignettes" / f"{name}.Rmd").read_text()
        skipped = re.findall(r"```\{r ([\w-]+)[^}]*eval\s*=\s*FALSE", source)
        assert skipped in ([], ["install"]), (name, skipped)


# The vignettes with the most cluster jobs (launch_cluster, SLURM, Ray, processes by hand).
LONGEST = ("multi-worker", "running-on-a-cluster", "data-bigger-than-memory")


def _render(name, out):
    return subprocess.run(
        ["Rscript", str(ROOT / "scripts" / "render_vignette.R"),
         str(ROOT / "vignettes" / f"{name}.Rmd"), str(out)],
        cwd=ROOT, env=r_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    pages, failures = {}, {}
    # Two renders at a time: one alone leaves a core of the two idle much of the time (its
    # clusters start processes and wait on each other). Those that run the most cluster jobs
    # start first, so that the two threads end near together (in name order the two longest
    # started last).
    order = sorted(VIGNETTES, key=lambda name: name not in LONGEST)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = {name: pool.submit(_render, name, out) for name in order}
        for name, run in runs.items():
            done = run.result()
            if done.returncode != 0:
                failures[name] = done.stderr[-3000:]
            else:
                pages[name] = (out / f"{name}.html").read_text()
    return pages, failures


@pytest.mark.parametrize("name", VIGNETTES)
def test_vignette_renders_with_its_results(rendered, name):
    pages, failures = rendered
    assert name not in failures, failures.get(name)
    text = text_of(pages[name])
    for expected in EXPECTED[name]:
        assert expected in text or expected in pages[name], (name, expected)


def test_accuracies_in_the_tutorials(rendered):
    pages, _ = rendered
    start = text_of(pages["getting-started"])
    table = re.findall(r"#>\s+\d+\s+(default|one_device|mirrored|central_storage)\s+\d\s+([\d.]+)", start)
    assert len(table) == 4 and all(float(acc) >= 0.9 for _, acc in table), table
    ps_page = text_of(pages["parameter-server"])
    coordinator = float(re.search(r"coordinator: test accuracy ([\d.]+)", ps_page).group(1))
    assert coordinator >= 0.9
    # The same weights in a plain single-process model evaluate to the same accuracy.
    plain = float(re.search(r"#>\s+accuracy\s+loss\s*#>\s+([\d.]+)", ps_page).group(1))
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
    accuracies = [float(a) for a in re.findall(r"#>\s+accuracy\s+loss\s*#>\s+([\d.]+)", text)]
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
    assert len(accuracies) == 3 and all(a >= 0.8 for a in accuracies), accuracies
