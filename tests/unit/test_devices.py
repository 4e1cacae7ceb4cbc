import pytest

from raytf.worker.process.devices import collective_implementation, cuda_visible_devices


def test_cpu_worker_sees_no_gpu_even_on_a_gpu_node():
    assert cuda_visible_devices(["0", "1"], use_gpu=False, expected=0) == ""


def test_gpu_worker_sees_exactly_its_ray_gpus():
    assert cuda_visible_devices(["3"], use_gpu=True, expected=1) == "3"
    assert cuda_visible_devices([4, 5, 6, 7], use_gpu=True, expected=4) == "4,5,6,7"


def test_fewer_gpus_than_promised_is_an_error():
    with pytest.raises(RuntimeError, match="promised 2 GPU"):
        cuda_visible_devices(["0"], use_gpu=True, expected=2)


def test_duplicate_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="same GPU twice"):
        cuda_visible_devices(["1", "1"], use_gpu=True, expected=2)


def test_collectives():
    assert collective_implementation(True) == "NCCL"
    assert collective_implementation(False) == "RING"
