"""The seeds' program as written (issue 33): the mlverse/distributed README's R program on 4 hosts.

Four hosts of the test bed (tfdistributed.testbeds.hostbed: network namespaces with their own addresses,
root only), one Rscript worker on each, started by hand with the TF_CONFIG the script writes
itself after Python started (tf$version), TensorFlow's own MultiWorkerMirroredStrategy, the
TFDS digits (one file per split, as TFDS writes small splits) mapped with an R function, cached,
shuffled and batched at 64 x workers, a model built with R doubles and compiled with
metrics = "accuracy", and Keras' own model$fit. It used to end with "Currently error when
consuming dataset"; it must train 4 replicas to identical weights with a falling loss.
"""

from __future__ import annotations

import subprocess

import numpy as np
import psutil
import pytest

from rsupport import ROOT, r_env

from tfdistributed.testbeds import hostbed
from tfdistributed import write_digits_tfds

pytestmark = pytest.mark.cluster
# Shipped with the package (the multi-worker tutorial runs it too).
PROGRAM = ROOT / "rpkg" / "inst" / "examples" / "mlverse.R"


@pytest.mark.timeout(900)
def test_the_mlverse_program_trains_four_replicas_on_four_hosts(tmp_path):
    try:
        hostbed.check_can_build()
    except hostbed.HostBedError as e:
        pytest.skip(f"no test bed of hosts here: {e}")
    data_dir = write_digits_tfds(tmp_path / "tfds")
    procs = []
    with hostbed.HostBed(4) as bed:
        workers = ",".join(f"{h.address}:2222" for h in bed.hosts)
        try:
            for i, host in enumerate(bed.hosts):
                procs.append(subprocess.Popen(
                    [*host.prefix, "Rscript", str(PROGRAM), str(i), workers, str(data_dir),
                     str(tmp_path)], cwd=ROOT, env=r_env(),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outputs = [p.communicate(timeout=600)[0] for p in procs]
        finally:
            for p in procs:  # SIGKILL: a multi-worker task notes a SIGTERM and keeps waiting
                if p.poll() is None:
                    for child in psutil.Process(p.pid).children(recursive=True):
                        child.kill()
                    p.kill()
                    p.wait()
    for i, (p, output) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"worker {i}:\n{output[-4000:]}"
        assert f"worker {i}: 4 replicas" in output, output[-2000:]
    runs = [np.load(tmp_path / f"worker-{i}.npz") for i in range(4)]
    assert all(int(r["replicas"]) == 4 for r in runs)
    for other in runs[1:]:
        for name in runs[0].files:
            np.testing.assert_array_equal(runs[0][name], other[name], err_msg=name)
    loss = runs[0]["loss"]
    assert loss[-1] < 0.7 * loss[0], loss
