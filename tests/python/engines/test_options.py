"""launch()'s options as objects (tfdistributed/engines/options.py and each engine's folder):
the job's shape (Scaling), where it runs (an engine), how it heals (Restarts), how it is watched
(Watch); each checked where it is made, with a message that names the fix; each default written
once; and the plan, which checks the shape against the engine before anything starts. No
cluster is started here."""

import inspect

import pytest

import tfdistributed as tfd
from tfdistributed.cluster import join
from tfdistributed.engines.options import DEFAULT_TIMEOUT, JobPlan
from tfdistributed.watch import recorder


@pytest.mark.parametrize("make, message", [
    (lambda: tfd.Scaling(workers=0), "`workers` must be >= 1"),
    (lambda: tfd.Scaling(workers=2.0), "E.g. workers=2, not 2.0"),
    (lambda: tfd.Scaling(ps=-1), "`ps` must be >= 0"),
    (lambda: tfd.Scaling(chief="yes"), "`chief` must be TRUE/True or FALSE/False"),
    (lambda: tfd.Scaling(min_workers=0), "`min_workers` must be >= 1"),
    (lambda: tfd.Scaling(workers=2, min_workers=3), "min_workers=3 is more than the job's 2 "
                                                    "workers: min_workers <= workers."),
    (lambda: tfd.Scaling(workers=2, ps=1, chief=True, min_workers=1),
     "`min_workers` applies to multi-worker jobs"),
    (lambda: tfd.Scaling(gpus_per_task=-1), "a whole number of GPUs (0 or more), or 'all'"),
    (lambda: tfd.Scaling(workers=3, cluster=tfd.local_cluster(2)),
     "`workers=3` and the `cluster`'s workers (2) disagree"),
    (lambda: tfd.Scaling(cluster={"worker": ["127.0.0.1"]}), "port"),
    (lambda: tfd.Restarts(max_restarts=-1), "`max_restarts` must be >= 0"),
    (lambda: tfd.Restarts(max_restarts=2.0), "E.g. max_restarts=2, not 2.0"),
    (lambda: tfd.Restarts(join_timeout="soon"), "`join_timeout` must be a number of seconds"),
    (lambda: tfd.Restarts(grace=-1), "`grace` must be a number of seconds"),
    (lambda: tfd.Watch(progress="bars"), "`progress` must be True, False, 'lines' or 'live'"),
    (lambda: tfd.Watch(stall_warning=0.5), "`stall_warning` must be a number of seconds of at "
                                           "least 1"),
    (lambda: tfd.Watch(tensorboard=3), "`tensorboard` must be a directory path"),
    (lambda: tfd.Watch(show_all="yes"), "`show_all` must be TRUE/True or FALSE/False"),
    (lambda: tfd.Watch(echo=1), "`echo` must be TRUE/True or FALSE/False"),
    (lambda: tfd.Watch(on_output="print"), "`on_output` must be a function of a line"),
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
    with pytest.raises(tfd.TFDistributedError) as info:
        make()
    assert message in str(info.value)


def test_a_parameter_server_job_needs_its_chief_in_either_language():
    with pytest.raises(tfd.ClusterConfigError) as info:
        tfd.Scaling(workers=2, ps=1)
    assert str(info.value).startswith("A parameter-server job needs chief=True: the target runs "
                                      "as the chief (the coordinator)")
    assert info.value.message_for("python").endswith(
        "E.g. tfd.Scaling(workers=2, ps=1, chief=True).")
    assert info.value.message_for("r").endswith("E.g. scaling(workers = 2, ps = 1, chief = TRUE).")
    with pytest.raises(tfd.ClusterConfigError, match='has ps tasks but no "chief"'):
        tfd.Scaling(cluster={"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]})


def test_the_shape_is_a_value_with_its_counts():
    shape = tfd.Scaling(workers=3, chief=True, min_workers=2)
    assert repr(shape) == "Scaling(workers=3, chief=True, min_workers=2)"
    assert shape.trainers == 4 and not shape.parameter_server
    assert shape.tasks() == [("chief", 0), ("worker", 0), ("worker", 1), ("worker", 2)]
    assert shape.resized(3).workers == 2
    ps = tfd.Scaling(workers=2, ps=1, chief=True)
    assert ps.trainers == 2 and ps.parameter_server
    assert ps.tasks() == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    cluster = tfd.local_cluster(2, ps=1, chief=True)
    given = tfd.Scaling(cluster=cluster)
    assert (given.workers, given.ps, given.chief) == (2, 1, True)
    assert given.cluster.as_dict() == cluster
    with pytest.raises(AttributeError):
        shape.workers = 4


def test_option_objects_are_values_that_show_what_was_given():
    slurm = tfd.engines.Slurm(partition="cpu", time="02:00:00", sbatch_args="--gres=gpu:1")
    assert repr(slurm) == "Slurm(partition='cpu', time='02:00:00', sbatch_args=('--gres=gpu:1',))"
    assert slurm == tfd.engines.Slurm(partition="cpu", time="02:00:00",
                                      sbatch_args=["--gres=gpu:1"])
    with pytest.raises(AttributeError):
        slurm.partition = "gpu"
    assert slurm.replace(partition="gpu").partition == "gpu" and slurm.partition == "cpu"
    assert repr(tfd.Restarts(max_restarts=3)) == "Restarts(max_restarts=3)"
    assert tfd.Watch(stall_warning=None).task_env()[recorder.STALL_WARNING_ENV] == "0"
    with pytest.raises(TypeError):
        tfd.Restarts(3)  # keyword-only: restarts=tfd.Restarts(max_restarts=3)
    with pytest.raises(TypeError):
        tfd.Scaling(3)  # keyword-only: tfd.Scaling(workers=3)


def test_each_default_is_the_one_of_its_one_place():
    assert tfd.Watch().stall_warning == recorder.DEFAULT_STALL_WARNING
    assert tfd.Restarts().lost_after == join.DEFAULT_JOIN_TIMEOUT
    assert tfd.Restarts(join_timeout=20).lost_after == 20
    assert inspect.signature(tfd.launch).parameters["timeout"].default == DEFAULT_TIMEOUT


def test_launch_takes_the_shape_and_the_short_call_stays_short(tmp_path):
    parameters = inspect.signature(tfd.launch).parameters
    assert list(parameters) == ["target", "scaling", "workers", "engine", "restarts", "watch",
                                "env", "args", "cwd", "timeout"]
    missing = str(tmp_path / "missing.py")
    # The shape is checked before the target: nothing starts.
    with pytest.raises(tfd.ArgumentTypeError, match="`workers` and `scaling` were both given"):
        tfd.launch(missing, tfd.Scaling(workers=2), workers=3)
    with pytest.raises(tfd.ArgumentTypeError, match="`scaling` must be a Scaling, got 3") as info:
        tfd.launch(missing, 3)
    assert info.value.message_for("r").endswith("E.g. scaling(workers = 2, ps = 1, chief = TRUE).")
    with pytest.raises(tfd.ArgumentTypeError, match="`workers` must be >= 1"):
        tfd.launch(missing, workers=0)
    with pytest.raises(tfd.LaunchError, match="does not exist"):
        tfd.launch(missing, workers=2, watch=tfd.Watch(echo=False))


def test_the_plan_refuses_what_is_not_an_option_object_and_a_shape_its_engine_cannot_run():
    common = dict(target="t.py", scaling=tfd.Scaling(), timeout=60)
    with pytest.raises(tfd.ArgumentTypeError) as info:
        JobPlan(**common, engine="ray", restarts=tfd.Restarts(), watch=tfd.Watch())
    assert str(info.value).endswith("E.g. engine=tfd.engines.Ray().")
    assert info.value.message_for("r").endswith("E.g. engine = ray().")
    with pytest.raises(tfd.ArgumentTypeError, match="`restarts` must be a Restarts"):
        JobPlan(**common, engine=tfd.engines.Local(), restarts=2, watch=tfd.Watch())
    with pytest.raises(tfd.ArgumentTypeError, match="`cluster` only applies to local clusters"):
        JobPlan(target="t.py", scaling=tfd.Scaling(cluster=tfd.local_cluster(2)),
                engine=tfd.engines.Ray(), restarts=tfd.Restarts(), watch=tfd.Watch())
    with pytest.raises(tfd.ArgumentTypeError, match="`hosts` names where the tasks of an "
                                                    "explicit `cluster` run"):
        JobPlan(**common, engine=tfd.engines.Local(hosts={"10.0.0.2": ["ssh", "n2"]}),
                restarts=tfd.Restarts(), watch=tfd.Watch())
    plan = JobPlan(**{**common, "env": {"MINE": "1"}}, engine=tfd.engines.Local(),
                   restarts=tfd.Restarts(join_timeout=30), watch=tfd.Watch(stall_timeout=90))
    env = plan.task_env()
    assert env["MINE"] == "1" and env[join.ENV] == "30"
    assert env[recorder.STALL_TIMEOUT_ENV] == "90" and env[recorder.STALL_WARNING_ENV] == "60"
