"""The replica device-ID format has one owner: what the plugin writes, every reader splits."""

from kubegpu.sharing.replicas import is_replica, physical_id, replica_id, split_replica


def test_a_replica_id_splits_back_into_its_device_and_number() -> None:
    rid = replica_id("GPU-3c1f8a2e-0000", 2)
    assert rid == "GPU-3c1f8a2e-0000::2"
    assert split_replica(rid) == ("GPU-3c1f8a2e-0000", "2")
    assert physical_id(rid) == "GPU-3c1f8a2e-0000"
    assert is_replica(rid)


def test_an_id_that_is_not_a_replica_is_its_own_physical_device() -> None:
    for device in ("GPU-3c1f8a2e-0000", "MIG-5d2e", "0", "0:1", "all"):
        assert split_replica(device) == (device, None)
        assert physical_id(device) == device
        assert not is_replica(device)
