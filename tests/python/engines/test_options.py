"""launch()'s options as objects (tfdistributed/engines/options.py): each checked where it is
made, with a message that names the fix; each default written once; and the keyword arguments
of before (max_restarts=, backend=, partition=...) folded into the objects for one release, with a
DeprecationWarning that gives the new spelling. No cluster is started here."""

import inspect
import warnings

import pytest

import tfdistributed as tfd
from tfdistributed.cluster import join
from tfdistributed.engines import regroup
from tfdistributed.engines.deprecated import upgrade
from tfdistributed.engines.options import DEFAULT_TIMEOUT, JobPlan
from tfdistributed.watch import recorder


@pytest.mark.parametrize("make, message", [
    (lambda: tfd.Restarts(max_restarts=-1), "`max_restarts` must be >= 0"),
    (lambda: tfd.Restarts(max_restarts=2.0), "E.g. max_restarts=2, not 2.0"),
    (lambda: tfd.Restarts(min_workers=0), "`min_workers` must be >= 1"),
    (lambda: tfd.Restarts(join_timeout="soon"), "`join_timeout` must be a number of seconds"),
    (lambda: tfd.Restarts(grace=-1), "`grace` must be a number of seconds"),
    (lambda: tfd.Watch(progress="bars"), "`progress` must be True, False, 'lines' or 'live'"),
    (lambda: tfd.Watch(stall_warning=0.5), "`stall_warning` must be a number of seconds of at "
                                           "least 1"),
    (lambda: tfd.Watch(tensorboard=3), "`tensorboard` must be a directory path"),
    (lambda: tfd.Watch(show_all="yes"), "`show_all` must be TRUE/True or FALSE/False"),
    (lambda: tfd.engines.Local(hosts={"10.0.0.2": "ssh node"}), "command prefix"),
    (lambda: tfd.engines.Local(tasks=[("worker",)]), "`tasks` must list (task_type, task_index)"),
    (lambda: tfd.engines.Local(prepare_task="pin"), "`prepare_task` must be a function"),
    (lambda: tfd.engines.Slurm(time="two hours"), "`time` must be SLURM's --time, e.g. "
                                                  "'02:00:00'"),
    (lambda: tfd.engines.Slurm(sbatch_args=[1]), "`sbatch_args` must be a list of command-line"),
    (lambda: tfd.engines.Slurm(partition=""), "`partition` must be a non-empty string"),
    (lambda: tfd.engines.Ray(ray_options=[1]), "`ray_options` must be a dict of actor options"),
    (lambda: tfd.engines.Ray(python=3), "`python` must be a non-empty string"),
])
def test_each_option_is_checked_where_it_is_made(make, message):
    with pytest.raises(tfd.ArgumentTypeError) as info:
        make()
    assert message in str(info.value)


def test_option_objects_are_values_that_show_what_was_given():
    slurm = tfd.engines.Slurm(partition="cpu", time="02:00:00", sbatch_args="--gres=gpu:1")
    assert repr(slurm) == "Slurm(partition='cpu', time='02:00:00', sbatch_args=('--gres=gpu:1',))"
    assert slurm == tfd.engines.Slurm(partition="cpu", time="02:00:00",
                                      sbatch_args=["--gres=gpu:1"])
    with pytest.raises(AttributeError):
        slurm.partition = "gpu"
    assert slurm.replace(partition="gpu").partition == "gpu" and slurm.partition == "cpu"
    assert repr(tfd.Restarts(max_restarts=3, min_workers=2)) == \
        "Restarts(max_restarts=3, min_workers=2)"
    assert tfd.Watch(stall_warning=None).task_env()[recorder.STALL_WARNING_ENV] == "0"
    with pytest.raises(TypeError):
        tfd.Restarts(3)  # keyword-only: restarts=tfd.Restarts(max_restarts=3)


def test_each_default_is_the_one_of_its_one_place():
    assert tfd.Watch().stall_warning == recorder.DEFAULT_STALL_WARNING
    assert tfd.Restarts().lost_after == join.DEFAULT_JOIN_TIMEOUT
    assert tfd.Restarts(join_timeout=20).lost_after == 20
    assert inspect.signature(tfd.launch).parameters["timeout"].default == DEFAULT_TIMEOUT


def test_the_plan_refuses_what_is_not_an_option_object():
    common = dict(target="t.py", workers=2, ps=0, chief=False, cluster=None, timeout=60,
                  env=None, args=(), cwd=None, on_output=None, echo=False)
    with pytest.raises(tfd.ArgumentTypeError) as info:
        JobPlan(**common, engine="ray", restarts=tfd.Restarts(), watch=tfd.Watch())
    assert str(info.value).endswith("E.g. engine=tfd.engines.Ray().")
    assert info.value.message_for("r").endswith("E.g. engine = ray().")
    with pytest.raises(tfd.ArgumentTypeError, match="`restarts` must be a Restarts"):
        JobPlan(**common, engine=tfd.engines.Local(), restarts=2, watch=tfd.Watch())
    plan = JobPlan(**{**common, "env": {"MINE": "1"}}, engine=tfd.engines.Local(),
                   restarts=tfd.Restarts(join_timeout=30), watch=tfd.Watch(stall_timeout=90))
    env = plan.task_env()
    assert env["MINE"] == "1" and env[join.ENV] == "30"
    assert env[recorder.STALL_TIMEOUT_ENV] == "90" and env[recorder.STALL_WARNING_ENV] == "60"


def test_the_old_keywords_are_regrouped_under_the_objects_that_hold_them_now():
    found = regroup(["backend", "partition", "max_failures", "stall_warning", "python"], "slurm")
    assert found == {"engine": "slurm", "engine_fields": {"partition": "partition",
                                                          "python": "python"},
                     "restarts": {"max_failures": "max_restarts"},
                     "watch": {"stall_warning": "stall_warning"}}
    assert regroup(["hosts", "warm_start", "grace"])["engine"] == "local"


@pytest.mark.parametrize("names, backend, message", [
    (["partition"], None, "`partition` is an option of the slurm engine, not of the local one: "
                          "engine=tfd.engines.Slurm(partition=...)"),
    (["hosts"], "ray", "`hosts` is an option of the local engine"),
    (["poll"], "local", "engine=tfd.engines.Slurm(poll=...) or engine=tfd.engines.Ray(poll=...)"),
    (["max_restart"], None, "Unknown argument `max_restart` for launch(). Did you mean "
                            "'max_restarts'?"),
    (["max_restarts", "max_failures"], "ray", "two names of one option"),
    ([], "slrum", "`backend` must be 'local', 'slurm' or 'ray', got 'slrum'. Did you mean "
                  "'slurm'?"),
])
def test_an_old_keyword_that_fits_nowhere_says_where_it_belongs(names, backend, message):
    with pytest.raises(tfd.ArgumentTypeError) as info:
        regroup(names, backend)
    assert message in str(info.value)


def test_an_option_given_both_ways_is_refused():
    with pytest.raises(tfd.ArgumentTypeError, match="`max_restarts` and `restarts=` were both "
                                                    "given"):
        upgrade({"max_restarts": 2}, restarts=tfd.Restarts(max_restarts=1))
    with pytest.raises(tfd.ArgumentTypeError, match="`backend` and `engine=` were both given"):
        upgrade({"backend": "ray"}, engine=tfd.engines.Ray())


def test_the_old_spelling_warns_once_per_call_with_the_new_one(tmp_path):
    # The warning comes before anything runs: a missing script then fails as it would have.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(tfd.LaunchError, match="does not exist"):
            tfd.launch(str(tmp_path / "missing.py"), backend="local", warm_start=False,
                       max_restarts=2, min_workers=None, progress=False, stall_warning=30)
    assert [w.category for w in caught] == [DeprecationWarning]
    said = str(caught[0].message)
    assert said.startswith("launch(..., backend='local', warm_start=False, max_restarts=2, "
                           "min_workers=None, progress=False, stall_warning=30): these keyword "
                           "arguments are deprecated")
    assert said.endswith("use engine=tfd.engines.Local(warm_start=False), "
                         "restarts=tfd.Restarts(max_restarts=2, min_workers=None), "
                         "watch=tfd.Watch(progress=False, stall_warning=30).")
    assert caught[0].filename == __file__  # the caller's line, not launch()'s
