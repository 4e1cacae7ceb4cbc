"""What the workers said: one poll's contents routed to the driver's policies.

Part of the controller (a base class of ``Controller``, kept apart because it
is one concept: intake, where the rest of the controller is the state
machine). Reports go to the outputs, the callbacks and the watchdog; steps to
the status; parts to the checkpoint commits, whose commits may call for a
restart (a drain's or a growth's); notices to the resize policy; shard
positions to the data feed; session replies to their listener, last. A commit
is told to the status and the callbacks (``_on_commit``).
"""

from __future__ import annotations

import time

from raytf.driver.resize_policy import Restart
from raytf.driver.states import outranking
from raytf.messages import WorkerPoll


class PollIntake:
    _startup_stale = False  # a rank's start-up stamps came this round (``_after_polls``)

    def _take(self, poll: WorkerPoll, now: float) -> Restart | None:
        """Route one poll's contents to the policies; a restart a commit calls for."""
        self._take_reports(poll, now)
        self.events.emit("on_poll", self.attempt, poll)  # the run's record (raytf.observe)
        if poll.step is not None:
            self._take_step(poll.rank, poll.step, now)
        for note in poll.compat_notes:  # the same on every rank and attempt
            self.progress.notice(note)
        if poll.copy_cost is not None:  # the same on every rank
            self.ckpts.copy_cost = poll.copy_cost
        if poll.startup:  # once per rank and attempt: the summary once a round (below)
            self._startup_stale = True
        restart = None
        for ckpt in self.ckpts.on_parts(poll.parts, attempt=self.attempt):
            restart = outranking(restart, self._execute(self.resizer.committed(ckpt)))
        if poll.notice:
            self._execute(self.resizer.on_notice(poll.notice))
        self.data.on_poll(poll.rank, poll.shard_epochs, poll.positions)
        # Last: a session that asked for a checkpoint finds it committed when the answer comes.
        if self.listeners.on_reply is not None:
            for reply in poll.replies:
                self.listeners.on_reply(reply)
        return restart

    def _after_polls(self) -> None:
        """Once a round, after every poll is taken: the start-up timeline summed up over
        all ranks (per poll, 1,024 ranks' first polls cost 1,024 summaries of 1,024)."""
        if self._startup_stale and self.group is not None:
            self.status.startup = self.group.timeline.summary()
        self._startup_stale = False

    def _take_reports(self, poll: WorkerPoll, now: float) -> None:
        for metrics in self.outputs.add_reports(poll.reports):
            self.ckpts.note_report(metrics)
            self.events.emit("on_report", metrics)
            if self.listeners.on_report is not None:
                self.listeners.on_report(metrics)
        if poll.reports:
            self.progress.on_reports(poll.reports)
            self.watchdog.on_activity(now)
        beats = (poll.beats, poll.ticks)  # the loop's heartbeats, progress raytf saw itself
        if poll.waiting or beats != self._beats.get(poll.rank):
            # A session between commands is idle, an evaluation busy: neither is hung.
            self._beats[poll.rank] = beats
            self.watchdog.on_activity(now)
        self.watchdog.on_phases(poll.rank, poll.phases, now)

    def _take_step(self, rank: int, step: int, now: float) -> None:
        self.status.workers[rank]["last_step"] = step
        if rank != 0 or step == self.watchdog.last_step:
            return
        self.status.last_step = step
        took = self.watchdog.on_step(step, now)
        if took is not None:
            self.status.recoveries_s = [round(r, 3) for r in self.watchdog.recoveries_s]
            self.status.resumed_at.append(time.time())
            self.progress.message(f"resumed at step {step}, {took:.1f} s after the restart began")
        trained_s = now - (self.watchdog.first_step_at or now)
        due = trained_s >= self.settings.standby_after_s
        if self.use_standbys and not self._standbys_asked and due:
            # Spares start importing TF once training has run a while, not during start-up:
            # a short run, or an attempt that fails at once, pays for no spare processes.
            self._standbys_asked = True
            self.pool.add_standbys()
        elif self._standbys_asked:
            self.pool.keep_reserve()  # a node that joined since may take a fixed group's

    def _on_commit(self, ckpt) -> None:
        """Every commit, an emergency one included: status, callbacks, a verbose line."""
        self.status.checkpoints = self.ckpts.kept[-20:]
        self.events.emit("on_commit", ckpt)  # the run's record: its commit time too
        self.events.emit("on_checkpoint", ckpt.step, ckpt.path)
        if self.run_config.verbose >= 2:
            self.progress.message(f"committed checkpoint at step {ckpt.step}")
