"""Elastic jobs: a host gone for good shrinks the job, a host that comes back grows it again
(tfdistributed.engines.elastic), and a lost host is named as such, not called a bug.

The policy is checked first with an engine whose places answer as the test says (fast), then
for real on the host bed: 3 hosts, min_workers=2, one host's task SIGKILLed and its link taken
down at a step drawn at random, its link brought back while the job trains on 2.
"""

import random
import subprocess
import threading
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest

import tfdistributed as tfd
from tfdistributed.engines.base import LaunchResult, Launcher
from tfdistributed.engines.elastic.membership import Membership, size_for_batch
from tfdistributed.engines.elastic.policy import Elastic
from tfdistributed.engines.elastic.probes import largest_group, probe_hosts
from tfdistributed.engines.output import Relay
from tfdistributed.engines.options import Engine, JobPlan
from tfdistributed.engines.restarts import failure_of, run
from tfdistributed.watch.collector import JobWatch

from elasticsupport import (BATCH, EPOCHS, EXAMPLES, SAVE_FREQ, SCRIPT, accuracy_of, build_bed3,
                            one_device_accuracy, read)


# --- the policy, with places that answer as the test says ---------------------------------------

class Places:
    """An engine's places: ``down`` do not answer; each attempt's places are recorded."""

    place_word = "host"

    def __init__(self, names=("h0", "h1", "h2"), per_place=1, down=()):
        self.names, self.per_place, self.down = list(names), per_place, set(down)
        self.ran_on = []

    def places(self):
        return list(self.names)

    def trainers(self, places):
        return self.per_place * len([p for p in places if p in self.names])

    def probe(self, places, active):
        return {p: ("its link is down" if p in self.down else None) for p in places}


def elastic(places, min_workers, grace=0.2, watch=None):
    relay = Relay(echo=False, show_all=False,
                  watch=watch or JobWatch(display=None, stall_warning=None))
    return Elastic(places, min_workers, grace, relay)


def test_sizes_a_global_batch_splits_over():
    assert size_for_batch(3, 2, 96, 1) == 3
    assert size_for_batch(3, 2, 64, 1) == 2      # 64 on 3 replicas is uneven: 2 workers
    assert size_for_batch(3, 3, 64, 1) is None
    assert size_for_batch(4, 1, 96, 2) == 4 and size_for_batch(3, 1, 32, 2) == 2
    assert size_for_batch(3, 2, None, None) == 3


def test_the_largest_group_of_hosts_that_reach_each_other_goes_on():
    assert largest_group(["a", "b", "c"], {"a": {"b"}, "b": {"a"}, "c": set()}) == {"a", "b"}
    # a tie goes to the group of the first host (the chief's, or worker 0's)
    assert largest_group(["a", "b", "c", "d"], {"a": {"b"}, "b": set(), "c": {"d"},
                                                 "d": set()}) == {"a", "b"}
    assert largest_group(["a", "b"], {"a": set(), "b": set()}) == set()


def test_membership_loses_and_regains_places_in_the_engines_order():
    members = Membership(["h0", "h1", "h2"], lambda places: len(places), 2)
    members.lose(["h1"], {"h1": "down"}, position=12)
    assert members.active == ["h0", "h2"] and members.lost["h1"]["position"] == 12
    members.back(["h1"])
    assert members.active == ["h0", "h1", "h2"] and not members.lost
    assert members.shrink_to(2) == ["h2"] and members.workers == 2


def test_a_lost_place_shrinks_the_job_and_is_announced():
    places = Places()
    policy = elastic(places, min_workers=2)
    assert policy.first() == ["h0", "h1", "h2"]
    places.down = {"h2"}
    said = policy.after_failure(0)
    assert "host h2 is gone (h2: its link is down" in said and "2 worker(s)" in said
    assert policy.placed() == ["h0", "h1"]
    assert [c.why for c in policy.members.changes] == ["start", "lost"]


def test_below_min_workers_the_job_ends_naming_the_lost_hosts():
    places = Places()
    policy = elastic(places, min_workers=3)
    policy.first()
    places.down = {"h1"}
    with pytest.raises(tfd.HostLostError, match=r"host h1 is gone.*its link is down.*needs "
                                                r"min_workers=3.*not a bug"):
        policy.after_failure(0)


def test_without_min_workers_a_lost_host_ends_the_job_as_a_lost_host():
    places = Places()
    policy = elastic(places, min_workers=None)
    policy.first()
    places.down = {"h0"}
    with pytest.raises(tfd.HostLostError, match=r"needs all 3 workers \(no min_workers"):
        policy.after_failure(0)


def test_a_place_down_at_the_start_is_left_out_and_grows_the_job_later():
    places = Places(down={"h1"})
    policy = elastic(places, min_workers=2)
    assert policy.first() == ["h0", "h2"]
    assert policy.members.changes[0].places == ["h1"]
    places.down = set()
    said = policy.after_planned_stop(0)
    assert "h1 answers again: the job grows to 3 worker(s)" in said
    assert policy.placed() == ["h0", "h1", "h2"]


@pytest.fixture
def four_places_of_64():
    """A 4-place job whose global batch (64 examples) does not split over 3: its places, watch
    and policy, started."""
    watch = JobWatch(display=None, stall_warning=None)
    watch.record("worker 0", {"kind": "begin", "examples_per_step": 64, "replicas": 4})
    places = Places(names=("h0", "h1", "h2", "h3"))
    policy = elastic(places, min_workers=1, watch=watch)
    policy.first()
    return places, watch, policy


def test_a_shrink_keeps_the_global_batch_splitting_evenly(four_places_of_64):
    places, _, policy = four_places_of_64
    places.down = {"h3"}
    said = policy.after_failure(0)   # 64 does not split over 3: 2 workers
    assert "2 worker(s) (leaving out h2 so that the global batch splits evenly)" in said


def test_places_left_out_for_the_batch_come_back_with_a_lost_one(four_places_of_64):
    places, watch, policy = four_places_of_64
    places.down = {"h3"}
    policy.after_failure(0)
    assert policy.placed() == ["h0", "h1"] and policy.members.spare == ["h2"]
    policy.attempt_workers = 2
    watch.record("worker 0", {"kind": "begin", "examples_per_step": 64, "replicas": 2})
    places.down = set()
    assert "grows to 4 worker(s)" in policy.after_planned_stop(1)
    assert policy.placed() == ["h0", "h1", "h2", "h3"]


def test_a_stop_to_grow_is_planned_whether_the_task_backed_up_or_met_the_notice_outside_fit():
    policy = elastic(Places(), min_workers=2)
    killed = {"ended": "was killed by signal 15", "preempted": False}
    assert not policy.planned(killed)
    policy.grow_asked = True
    assert policy.planned(killed) and policy.planned({"ended": "x", "preempted": True})
    assert not policy.planned({"ended": "was killed by signal 9", "preempted": False})


def test_a_lost_place_that_answers_while_the_job_trains_stops_it_at_its_next_backup():
    watch = JobWatch(display=None, stall_warning=None)
    places = Places()
    policy = elastic(places, min_workers=2, watch=watch)
    policy.first()
    places.down = {"h2"}
    policy.after_failure(0)
    watch.new_attempt(1)
    watch.record("worker 0", {"kind": "backup", "position": 10})
    places.down = set()

    class Job:
        preempted = threading.Event()

        def preempt(self):
            self.preempted.set()

    job = Job()
    with policy.watching(job):
        assert job.preempted.wait(10)
    assert policy.grow_asked
    assert any("stops at its next backup and grows to 3" in line for line in watch.due())


@dataclass(frozen=True, kw_only=True, repr=False)
class FakeEngine(Engine):
    """An engine whose attempts fail or succeed as the test says (no process)."""

    name: ClassVar[str] = "fake"
    outcomes: tuple = ()
    ran_on: list = field(default_factory=list)

    def check(self, scaling):
        pass

    def launcher(self, plan, relay):
        return FakeLauncher(plan, relay)


class FakeLauncher(Places, Launcher):
    """The launcher of a :class:`FakeEngine`: its places as :class:`Places`, its attempts as
    the engine's ``outcomes`` say."""

    def __init__(self, plan, relay):
        super().__init__()
        self.plan, self.relay = plan, relay
        self.outcomes, self.ran_on = list(plan.engine.outcomes), plan.engine.ran_on

    def job(self, attempt, deadline, places):
        self.ran_on.append(list(places))
        outcome, launcher = self.outcomes.pop(0), self

        class Job:
            def start(self):
                pass

            def wait(self, deadline):
                if outcome != "ok":
                    launcher.down |= {outcome}
                    raise tfd.LaunchError("lost", [], failure=failure_of("worker 2", -9, []))

            def results(self):
                return LaunchResult(cluster={}, tasks=[], seconds=0.0)

            def stop(self):
                pass

        return Job()


def test_a_membership_restart_does_not_spend_max_restarts():
    engine = FakeEngine(outcomes=("h2", "ok"))
    plan = JobPlan(target="t.py", scaling=tfd.Scaling(workers=3, min_workers=2), engine=engine,
                   restarts=tfd.Restarts(join_timeout=0.2),
                   watch=tfd.Watch(progress=False, stall_warning=None, echo=False))
    result = run(plan)   # max_restarts=0, yet it goes on without h2
    assert engine.ran_on == [["h0", "h1", "h2"], ["h0", "h1"]]
    assert [s["workers"] for s in result.sizes] == [3, 2] and result.attempts[0]["resized"]


# --- arguments ---------------------------------------------------------------------------------

def test_min_workers_needs_places_that_can_be_lost(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("pass\n")
    with pytest.raises(tfd.ArgumentTypeError, match="runs on this machine only"):
        tfd.launch(str(script), tfd.Scaling(workers=2, min_workers=1),
                   watch=tfd.Watch(echo=False))
    with pytest.raises(tfd.ArgumentTypeError, match="min_workers"):
        tfd.launch(str(script), tfd.Scaling(workers=2, min_workers=1.5),
                   watch=tfd.Watch(echo=False))


def test_probes_run_the_start_command_and_try_the_other_hosts(tmp_path):
    import portpicker

    closed = portpicker.pick_unused_port()   # nothing listens: "refused" is an answer
    answers = probe_hosts({"a": [], "b": ["false"]}, {"a": "127.0.0.1:1", "b": f"127.0.0.1:{closed}"})
    assert answers["a"] is None
    assert answers["b"].startswith("its start command failed (status 1")


# --- for real, on the host bed ------------------------------------------------------------------



@pytest.fixture(scope="module")
def bed3():
    """Three hosts, 10.77.0.2 to 10.77.0.4, on a bed of their own."""
    built = build_bed3()
    yield built
    built.down()


@pytest.mark.cluster
def test_a_host_lost_for_good_shrinks_the_job_and_its_return_grows_it(bed3, tmp_path):
    lose_at = random.Random().randrange(SAVE_FREQ + 1, 3 * 14)
    lost = bed3.hosts[2]
    outdir = tmp_path / "out"
    outdir.mkdir()
    gone, lines = threading.Event(), []

    def on_output(line):
        lines.append(line)
        if "is gone" in line:
            gone.set()
        if gone.is_set() and line.startswith("[tfdistributed] epoch"):
            # The job trains on 2 workers: the host comes back (its link up again).
            subprocess.run(["ip", "-n", lost.name, "link", "set", "eth0", "up"], check=True,
                           timeout=20)

    result = tfd.launch(SCRIPT, tfd.Scaling(min_workers=2, cluster=bed3.cluster(3)),
                        engine=tfd.engines.Local(hosts=bed3.launch_hosts()),
                        restarts=tfd.Restarts(join_timeout=15), timeout=600,
                        args=[str(outdir), "--backup", str(tmp_path / "backup"),
                                          "--epochs", str(EPOCHS), "--batch", str(BATCH),
                                          "--examples", str(EXAMPLES), "--save-freq",
                                          str(SAVE_FREQ), "--lose-at", str(lose_at),
                                          "--step-seconds", "0.15"],
                        watch=tfd.Watch(on_output=on_output, echo=False))
    sizes = [(s["workers"], s["why"], s["places"]) for s in result.sizes]
    assert sizes == [(3, "start", []), (2, "lost", [lost.address]), (3, "back", [lost.address])], \
        (lose_at, lines[-40:])
    assert result.sizes[1]["position"] <= lose_at < result.sizes[1]["position"] + SAVE_FREQ + 1
    said = "\n".join(lines)
    assert f"host {lost.address} is gone" in said and "its network is down" in said
    assert "not counted in max_restarts" in said and "a bug" not in said
    assert " - 2 of 3 workers" in said   # the progress display while it runs on 2
    # The last attempt's 3 workers end with the same weights, as accurate as one device.
    reports = [read(outdir, f"worker-{i}") for i in range(3)]
    assert {r["attempt"] for r in reports} == {2} and {r["workers"] for r in reports} == {3}
    for other in reports[1:]:
        for a, b in zip(reports[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(a, b)
    assert reports[0]["steps"] == EPOCHS * EXAMPLES // BATCH
    _, reference = one_device_accuracy()
    assert abs(accuracy_of(reports[0]["weights"]) - reference) <= 0.03, lose_at
    # Every epoch once in the history; the job trained 2 + 1 attempts, 0 counted restarts.
    assert len(result.history["loss"]) == EPOCHS and result.restarts == 2


@pytest.mark.cluster
def test_a_lost_host_is_named_as_such_not_a_bug_and_ends_a_job_that_needs_it(bed3, tmp_path):
    outdir = tmp_path / "out"
    outdir.mkdir()
    lost = bed3.hosts[1]
    try:
        with pytest.raises(tfd.HostLostError) as caught:
            tfd.launch(SCRIPT, tfd.Scaling(cluster=bed3.cluster(2)),
                       engine=tfd.engines.Local(hosts=bed3.launch_hosts()),
                       restarts=tfd.Restarts(max_restarts=4, join_timeout=8), timeout=300,
                       args=[str(outdir), "--backup", str(tmp_path / "backup"), "--lose",
                             "1", "--lose-at", "3", "--batch", "64", "--examples", "640"],
                       watch=tfd.Watch(echo=False))
    finally:
        subprocess.run(["ip", "-n", lost.name, "link", "set", "eth0", "up"], timeout=20)
    message = str(caught.value)
    assert f"host {lost.address} is gone" in message and "its network is down" in message
    assert "needs all 2 workers (no min_workers" in message and "not a bug" in message
    assert "worker 1 was killed by signal 9" in message
    assert len(caught.value.attempts) == 1   # not four restarts waiting for it
