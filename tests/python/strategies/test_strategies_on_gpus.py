"""What a strategy does on GPUs (tfdistributed/strategies/gpus.py), decided from a faked list of
TensorFlow's physical devices, on a machine without any: NCCL for the multi-worker all-reduce on
GPUs and TensorFlow's default on CPUs; memory growth asked for each GPU, and not when
TF_FORCE_GPU_ALLOW_GROWTH=false.

TensorFlow's own ``set_memory_growth`` refuses a device it does not have, so memory growth is
checked through an object with the same two calls that records them; the strategy options are
TensorFlow's own ``CommunicationOptions``.
"""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

import tfdistributed as tfd
from tfdistributed.strategies import gpus

IMPLEMENTATION = tf.distribute.experimental.CommunicationImplementation
OPTIONS = tf.distribute.experimental.CommunicationOptions
FAKE_GPUS = [tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
             for i in range(2)]


def test_multi_worker_on_gpus_gets_nccl():
    options = gpus.with_nccl(FAKE_GPUS)
    assert options.implementation == IMPLEMENTATION.NCCL


def test_multi_worker_on_cpus_keeps_tensorflows_default():
    assert gpus.with_nccl([]) is None
    given = OPTIONS(bytes_per_pack=1 << 20)
    assert gpus.with_nccl([], given) is given


def test_a_chosen_implementation_is_kept_and_other_options_too():
    ring = OPTIONS(implementation=IMPLEMENTATION.RING)
    assert gpus.with_nccl(FAKE_GPUS, ring) is ring
    packed = gpus.with_nccl(FAKE_GPUS, OPTIONS(bytes_per_pack=1 << 20, timeout_seconds=30.0))
    assert (packed.implementation, packed.bytes_per_pack, packed.timeout_seconds) == \
        (IMPLEMENTATION.NCCL, 1 << 20, 30.0)


class RecordingConfig:
    """``set_memory_growth`` and ``get_memory_growth`` as ``tf.config.experimental`` has them,
    recording the calls; ``fail`` makes ``set_memory_growth`` raise what TensorFlow raises."""

    def __init__(self, fail=None, growth=False):
        self.calls, self.fail, self.growth = [], fail, growth

    def set_memory_growth(self, device, enable):
        self.calls.append((device.name, enable))
        if self.fail is not None:
            raise self.fail

    def get_memory_growth(self, device):
        return self.growth


def test_memory_growth_is_asked_for_each_gpu():
    config = RecordingConfig()
    assert gpus.settle_gpus(FAKE_GPUS, config, environ={}) == FAKE_GPUS
    assert config.calls == [("/physical_device:GPU:0", True), ("/physical_device:GPU:1", True)]


def test_no_gpu_no_call():
    config = RecordingConfig()
    assert gpus.settle_gpus([], config, environ={}) == [] and config.calls == []


def test_tensorflows_own_variable_turns_memory_growth_off():
    config = RecordingConfig()
    gpus.settle_gpus(FAKE_GPUS, config, environ={gpus.GROWTH_ENV: "false"})
    assert config.calls == []
    assert gpus.growth_devices(FAKE_GPUS, {gpus.GROWTH_ENV: "true"}) == FAKE_GPUS
    with pytest.raises(tfd.StrategyError, match="must be 'true' or 'false'"):
        gpus.growth_devices(FAKE_GPUS, {gpus.GROWTH_ENV: "yes"})


def test_gpus_with_virtual_devices_are_left_as_configured():
    config = RecordingConfig(fail=ValueError("Cannot set memory growth on device when virtual "
                                             "devices configured"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpus.settle_gpus(FAKE_GPUS, config, environ={})
    assert len(config.calls) == 2


def test_gpus_started_before_the_strategy_are_named_in_a_warning():
    config = RecordingConfig(fail=RuntimeError("Physical devices cannot be modified after being "
                                               "initialized"))
    with pytest.warns(UserWarning, match="GPU:0, /physical_device:GPU:1\\) before the strategy "
                                         "was made, without memory growth"):
        gpus.settle_gpus(FAKE_GPUS, config, environ={})
    already = RecordingConfig(fail=RuntimeError("initialized"), growth=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpus.settle_gpus(FAKE_GPUS, already, environ={})


def test_the_real_path_reads_tensorflows_list():
    # This machine has no GPU: nothing is set, and make_strategy's options are unchanged.
    assert gpus.settle_gpus() == tf.config.list_physical_devices("GPU") == []
