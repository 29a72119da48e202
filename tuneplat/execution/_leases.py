"""Groups that trials start themselves (a ``TorchTrainer.fit()`` in a Tune trial): their slots, leased beside the trial."""

from __future__ import annotations

import logging
from typing import Any

from . import _protocol as proto
from ._dask_state import _DaskState, _Group, _LeaseAsk, _Rank

__all__ = ["_Leases"]

logger = logging.getLogger("tuneplat")


class _Leases(_DaskState):
    """Groups that trials start themselves (a ``TorchTrainer.fit()`` in a Tune trial) (a part of :class:`~tuneplat.execution._dask_executor.DaskTrialExecutor`)."""

    def _on_lease(self, group: _Group, rank: _Rank, request: Any, n: Any, strategy: Any) -> None:
        """A trial starts a group of its own (``TorchTrainer.fit()`` in a Tune trial): place it beside the trial.

        The trial keeps its own slot (its driver function runs there); the group
        gets ``n`` other slots, as soon as they are free, before any new trial.
        A group that can never fit beside the trial is refused at once, saying
        how to size the cluster.
        """
        req = {str(k): float(v) for k, v in dict(request).items()}
        n, strategy = int(n), str(strategy)
        own = {r.assignment.address for r in group.ranks} | {a.address for a in group.leases}
        if not self.ledger.could_place(req, n, strategy, own):
            total = len(self.ledger.slots)
            need = ", ".join(f"{k}={v:g}" for k, v in req.items())
            self._send(rank, proto.Refused((
                f"the TorchTrainer started inside trial {group.trial_id} needs {n} rank(s) with {{{need}}} beside "
                f"the trial, whose function holds {len(group.ranks)} worker slot(s) of the cluster's {total} "
                f"({self.ledger.describe()}): such a trial needs {n + len(group.ranks)} slots in all. Lower "
                f"ScalingConfig(num_workers=...), or give the cluster more workers (the embedded cluster: "
                f"TUNEPLAT_NUM_CPUS={n + len(group.ranks)} or more; see docs/porting-from-ray.md)")))
            return
        self._lease_queue.append(_LeaseAsk(group, rank, req, n, strategy))
        self._serve_leases()

    def _on_unlease(self, group: _Group, address: str) -> None:
        for a in group.leases:
            if a.address == address:
                group.leases.remove(a)
                self.ledger.release(a)
                break
        self._serve_leases()

    def _serve_leases(self) -> None:
        """Place waiting nested groups, oldest first; when nothing can ever free a slot, requeue the newest trial."""
        while self._lease_queue:
            ask = self._lease_queue[0]
            if ask.group.ended or ask.group.aborted or ask.rank.finished:
                self._lease_queue.pop(0)
                continue
            got = self.ledger.allocate(ask.request, ask.n, ask.strategy)
            if got is None and self.idle:  # idle runners hold slots: let them go
                self._dismiss_idle()
                got = self.ledger.allocate(ask.request, ask.n, ask.strategy)
            if got is None:
                break
            self._lease_queue.pop(0)
            ask.group.leases.extend(got)
            self._send(ask.rank, proto.Leased(got))
        if self._lease_queue:
            self._check_lease_deadlock()

    def _check_lease_deadlock(self) -> None:
        """Every running trial waits to place a group and none can be placed: nothing will ever free a slot.

        The newest waiting trial goes back to the queue (its driver function
        ends now and runs again later; not a failure), freeing its slot; new
        trials start only once the waiting groups are placed.
        """
        waiting = {id(a.group) for a in self._lease_queue}
        if self.idle or any(g.leases or id(g) not in waiting for g in self.groups.values()):
            return  # a group or a plain trial runs (or an idle runner leaves): slots will free up
        ask = self._lease_queue.pop()
        msg = (f"every worker slot is held by a trial waiting to place its TorchTrainer's ranks ({len(waiting)} such "
               f"trial(s), {len(self.ledger.slots)} slots): trial {ask.group.trial_id} goes back to the queue and "
               "starts again when there is room. To avoid this, set TuneConfig(max_concurrent_trials=...) to the "
               "number of trials whose driver and ranks fit at once (docs/porting-from-ray.md)")
        logger.info("tuneplat: %s", msg)
        self._send(ask.rank, proto.Requeue(msg))
