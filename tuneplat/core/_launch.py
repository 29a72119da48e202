"""Launching trials: suggestions, the room each needs, starting an attempt (a mixin of the tuner's loop)."""

from __future__ import annotations

import os
from typing import Any

from ..execution._executor import (
    TrialSpec,
)
from ..search._searcher import BasicVariantGenerator, Searcher
from ..search._tags import suggested_tag, variant_tag
from . import _events as ev
from ._journal import pickle_hex, to_jsonable
from ._loop_state import _LoopState
from ._shapes import ShapeRefused
from ._trial import RunState, Trial, TrialStatus

__all__: list[str] = []


class _Launching(_LoopState):
    """New trials, what fits, starts and the resizes they record."""

    def _new_trial(self, config: dict[str, Any]) -> Trial:
        index = len(self.trials)
        trial_id = f"{self._exp_tag}_{index:05d}"
        name = f"{self.trainable_name}_{trial_id}"
        path = os.path.join(self.experiment_dir, name)
        # Ray's experiment_tag, once per trial: the default generator's resolved values, or a searcher's whole config
        if isinstance(self.searcher, BasicVariantGenerator):
            tag = variant_tag(index, config, self.searcher.resolved_paths())
        else:
            tag = suggested_tag(index, config)
        # what the name creators see (the trial exists once its trial_add event is applied)
        draft = Trial(trial_id=trial_id, config=config, path=path, name=name, trainable_name=self.trainable_name,
                      recorded_tag=tag)
        if self.tc.trial_name_creator is not None:
            name = str(self.tc.trial_name_creator(draft))
        if self.tc.trial_dirname_creator is not None:
            dirname = str(self.tc.trial_dirname_creator(draft)).replace(os.sep, "_")
            path = os.path.join(self.experiment_dir, dirname)
            path = path if not os.path.exists(path) else f"{path}_{trial_id}"
        os.makedirs(path, exist_ok=True)
        self.trial_files.write_params(path, config)
        self._write(ev.TrialAdd(trial_id=trial_id, config=to_jsonable(config), path=path, name=name,
                                config_pickle=pickle_hex(config), trainable_name=self.trainable_name or None,
                                experiment_tag=tag, config_object=config))
        trial = self.by_id[trial_id]
        self.scheduler.on_trial_add(trial_id, config)
        self.hooks.trial_add(trial)
        return trial

    def _suggest(self) -> Trial | None:
        if self.searcher_done or self.searcher_blocked:
            return None
        limit = self.tc.num_samples
        if not isinstance(self.searcher, BasicVariantGenerator) and limit != -1 and self.suggested >= limit:
            self.searcher_done = True
            return None
        config = self.searcher.suggest(f"{self._exp_tag}_{len(self.trials):05d}")
        if config is None:
            self.searcher_blocked = True
            return None
        if config == Searcher.FINISHED or not isinstance(config, dict):
            self.searcher_done = True
            return None
        self.suggested += 1
        return self._new_trial(config)

    def _searcher_exhausted(self) -> bool:
        """The searcher will suggest nothing more, known without asking it: no room is waited for a trial that will
        never come (a cluster that lost the room for the experiment's shape after the last trial is not starved)."""
        limit = self.tc.num_samples
        if isinstance(self.searcher, BasicVariantGenerator):
            done = self.searcher.is_finished()
        else:
            done = limit != -1 and self.suggested >= limit
        if done:
            self.searcher_done = True
        return done

    def _budget_spent(self) -> bool:
        """Starting another trial would carry the end past the time budget: the mirror's backlog fills the rest."""
        if self._deadline is None:
            return False
        lag = self.hooks.backlog_s()
        spent = self.executor.now() + lag >= self._deadline
        if spent and not self._budget_note:
            self._budget_note = True
            self.reporter.say(f"tuneplat: not starting more trials for now: the MLflow mirror has ~{lag:.0f}s of runs "
                              "to write, and the time budget's end waits for it.")
        return spent

    def _launch_what_fits(self) -> None:
        """Start queued trials, then new ones, while the executor has room for each (chosen before reserving)."""
        limit = self.tc.max_concurrent_trials
        while True:
            if not self.queue and (self.searcher_done or self.searcher_blocked or self._searcher_exhausted()):
                self._set_waiting(0)
                return
            if self._budget_spent():
                return
            if limit is not None and self.executor.running() >= limit:
                self._set_waiting(0)  # (none of them could start now anyway)
                return
            self._set_waiting(self._could_start() - 1)  # (elastic groups: the others that wait for room)
            if self.queue:  # first in line: it waits for room of its own shape (no overtaking)
                trial = self.queue[0]
                shape = self._shape(trial)
                if shape is None:
                    self.queue.popleft()
                    continue
                reservation = self.executor.reserve(*shape)
                if reservation is None:
                    self._set_waiting(self._could_start())
                    return
                self.queue.popleft()
                self._start(trial, reservation)
                continue
            if self.shapes.gpu_auto.wants(self.request):  # GPU_memory="auto": its room depends on the trial's figure
                new = self._suggest()
                if new is not None:
                    self.queue.appendleft(new)  # it waits, first in line, for room of its figure
                continue
            reservation = self.executor.reserve()  # the experiment's shape: no suggestion without room
            if reservation is None:
                self._set_waiting(self._could_start())
                return
            new = self._suggest()
            shape = self._shape(new) if new is not None else None
            if new is None or shape is None:
                self.executor.unreserve(reservation)
                continue
            if shape != (self.request, self.world_size):
                self.executor.unreserve(reservation)
                reservation = self.executor.reserve(*shape)
                if reservation is None:
                    self.queue.appendleft(new)  # it waits, first in line, for room of its shape
                    return
            self._start(new, reservation)

    def _shape(self, trial: Trial) -> tuple[dict[str, float], int] | None:
        """``(request per rank, ranks)`` of the trial, ``GPU_memory="auto"`` sized now; None: it can never run."""
        try:
            return self.shapes.of(trial, self.trials)
        except ShapeRefused as exc:  # a bad resources function/value, or a shape that never fits
            self.reporter.say(f"tuneplat: trial {trial.trial_id} cannot run: {exc}")
            self._end_trial(trial, TrialStatus.ERROR, error=str(exc))
            return None

    def _could_start(self) -> int:
        """How many trials could start now if there were room: queued ones, then new suggestions (elastic only)."""
        if not self.scaling.wants_waiting():
            return 0
        count = len(self.queue)
        if not (self.searcher_done or self.searcher_blocked or self.stopping):
            total = getattr(self.searcher, "total", None) if isinstance(self.searcher, BasicVariantGenerator) else None
            if total is None:
                total = self.tc.num_samples if self.tc.num_samples != -1 else self.suggested + 1
            count += max(0, int(total) - self.suggested)
        limit = self.tc.max_concurrent_trials
        if limit is not None:
            count = min(count, max(0, limit - self.executor.running()))
        return count

    def _set_waiting(self, count: int) -> None:
        if self.scaling.wants_waiting():  # (elastic groups only: the scaling policy's ``waiting``)
            self.executor.set_waiting(max(0, count))

    def _start(self, trial: Trial, reservation: Any) -> None:
        """Start an attempt of ``trial`` on the executor's ``reservation``."""
        attempt = trial.attempts
        self.store.clean_staging(trial.path)  # what a crashed attempt left half-staged must not leak into this one
        checkpoint = trial.checkpoint
        start_iteration = trial.iteration
        cloned = trial.restart_iteration is not None
        if cloned:  # PBT's clone: go on from the source's checkpoint and its training_iteration (as Ray)
            start_iteration = trial.restart_iteration or 0
        elif trial.checkpoint is not None and trial.results:
            # a retry or resume: continue from the checkpoint, later results are superseded
            ck_it = trial.checkpoint_iteration()
            if ck_it < start_iteration:
                self._supersede(trial, ck_it)
            start_iteration = ck_it
        elif trial.checkpoint is None and trial.results:
            self._supersede(trial, 0)
            start_iteration = 0
        time_offset = float(trial.last_result.get("time_total_s", 0.0)) if trial.results else 0.0
        spec = TrialSpec(trial_id=trial.trial_id, name=trial.name, path=trial.path, attempt=attempt,
                         config=trial.config, start_iteration=start_iteration, time_offset=time_offset,
                         checkpoint_path=checkpoint.path if checkpoint else None,
                         remote_trial_dir=self.store.trial_url(trial.path),
                         request=self.shapes.started(trial)[0], world_size=self.shapes.started(trial)[1])
        self.running[trial.trial_id] = RunState(attempt, resumed_from_clone=cloned)
        previous_size = trial.world_size
        where = self.executor.start(spec, reservation)
        self._write(ev.TrialStart(
            trial_id=trial.trial_id, attempt=attempt, start_iteration=start_iteration, workers=where,
            checkpoint=checkpoint.path if checkpoint else None,
            # its own resources (with_resources(fn), a ScalingConfig with domains)
            resources=None if spec.request is None else {"num_workers": spec.world_size,
                                                          "resources_per_worker": dict(spec.request)},
            gpu_memory_auto=self.shapes.gpu_auto.note(trial.trial_id) if self.shapes.auto_sized(trial.trial_id) else None))
        self._record_world_size(trial, previous_size, len(where), start_iteration)
        self.hooks.trial_start(trial)
        self.reporter.event(f"trial {trial.trial_id} started (attempt {attempt}) on {where}")

    def _record_world_size(self, trial: Trial, previous: int | None, size: int, start_iteration: int) -> None:
        """An elastic trial's group started with ``size`` ranks (``previous`` before): journal a resize when that
        changed (its ``trial_start`` recorded the size)."""
        old, why = self._resize_reasons.pop(trial.trial_id, (previous, ""))
        old = old if old is not None else previous
        if self.min_world_size is None or old is None or size == old:
            return
        why = why or f"{size} rank(s) fit the cluster when the trial started again"
        message = f"resized from {old} to {size} ranks: {why}"
        self._write(ev.Resize(trial_id=trial.trial_id, from_world_size=old, to_world_size=size,
                                      iteration=start_iteration, reason=why, message=message))
        self.reporter.event(f"trial {trial.trial_id} {message}")
        self.hooks.trial_resize(trial, old, size, why)

    def _supersede(self, trial: Trial, after: int) -> None:
        moved = sum(1 for r in trial.results if r.get("training_iteration", 0) > after)
        self._write(ev.Superseded(trial_id=trial.trial_id, after_iteration=after, count=moved))
        self.trial_files.supersede(trial, after)  # result.json (and the callbacks' progress.csv) follow the journal
        self.hooks.trial_superseded(trial, after)

