"""The Ledger's books: CPUs counted per host (as Ray counts them per node), worker processes one rank each."""

from __future__ import annotations

import pytest

from tuneplat.execution._errors import PlacementError
from tuneplat.execution._placement import Ledger, Slot


def _ledger() -> Ledger:
    ledger = Ledger()
    ledger.refresh([Slot("tcp://a:1", "a", 1.0, {}, None), Slot("tcp://a:2", "a", 1.0, {}, None),
                    Slot("tcp://b:1", "b", 1.0, {}, None)])
    return ledger


def test_a_rank_asking_k_cpus_holds_k_cpus_of_its_host():
    ledger = _ledger()
    big = ledger.allocate({"CPU": 2}, 1)
    assert big is not None and [a.host for a in big] == ["a"]  # only host a has 2 CPUs
    # host a's other worker process is idle, but its CPUs are held: a 1-CPU rank goes to host b
    one = ledger.allocate({"CPU": 1}, 1)
    assert one is not None and [a.host for a in one] == ["b"]
    assert ledger.allocate({"CPU": 1}, 1) is None and ledger.free_count({"CPU": 1}, 3) == 0
    ledger.release(big[0])
    two = ledger.allocate({"CPU": 1}, 2)
    assert two is not None and sorted(a.address for a in two) == ["tcp://a:1", "tcp://a:2"]


def test_a_group_of_two_cpu_ranks_needs_a_host_each():
    ledger = _ledger()
    assert ledger.allocate({"CPU": 2}, 2) is None  # host b has 1 CPU
    ledger.refresh([*ledger.slots.values(), Slot("tcp://b:2", "b", 1.0, {}, None)])
    got = ledger.allocate({"CPU": 2}, 2)
    assert got is not None and sorted(a.host for a in got) == ["a", "b"]


def test_a_rank_no_host_can_hold_is_refused_with_the_numbers():
    ledger = _ledger()
    ledger.check_fits_empty({"CPU": 2}, 1)  # fits on host a
    with pytest.raises(PlacementError) as err:
        ledger.check_fits_empty({"CPU": 3}, 1)
    message = str(err.value)
    assert "No host has 3 CPUs for one rank" in message and "the largest has 2" in message
    assert "CPUs per host [2.0, 1.0]" in message


def test_a_worker_that_left_gives_its_hosts_cpus_back():
    ledger = _ledger()
    big = ledger.allocate({"CPU": 2}, 1)
    assert big is not None and ledger.allocate({"CPU": 1}, 1, "PACK") is not None  # (host b's)
    gone = big[0].address
    ledger.refresh([s for a, s in ledger.slots.items() if a != gone])  # its process died: the rank with it
    ledger.release(big[0])  # (the executor forgets the rank afterwards: nothing is given back twice)
    got = ledger.allocate({"CPU": 1}, 1)
    assert got is not None and got[0].host == "a"  # host a's remaining process and CPU are free again


def test_a_quarantine_ends_when_another_process_answers_at_the_address():
    """A worker's address can outlive its process (a nanny's restart at a fixed port): the quarantine of the old
    process ends once a new one is listed there, told apart by its ``uid``; never while the old one is listed."""
    ledger = Ledger()
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-old")])
    ledger.quarantine("tcp://a:9000")
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-old")])
    assert ledger.allocate({"CPU": 1}, 1) is None
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-new")])
    got = ledger.allocate({"CPU": 1}, 1)
    assert got is not None and got[0].address == "tcp://a:9000"
    # the process now listed is the one a later quarantine is for
    ledger.release(got[0])
    ledger.quarantine("tcp://a:9000")
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-new")])
    assert ledger.allocate({"CPU": 1}, 1) is None


def test_a_ranks_quarantine_is_for_the_process_it_ran_in_even_when_a_new_one_is_listed_already():
    """The tuner may read the cluster after the nanny replaced the rank's dead process and before it hears of the
    death: the quarantine named by the rank's assignment (the process it was placed on) ends at once."""
    ledger = Ledger()
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-old")])
    (placed,) = ledger.allocate({"CPU": 1}, 1)
    assert placed.uid == "/scratch/worker-old"
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-new")])
    ledger.release(placed)
    ledger.quarantine(placed.address, uid=placed.uid)
    ledger.refresh([Slot("tcp://a:9000", "a", 1.0, {}, None, uid="/scratch/worker-new")])
    assert ledger.allocate({"CPU": 1}, 1) is not None
