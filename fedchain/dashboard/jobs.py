"""Processes the control panel starts: ``fedchain`` subcommands, bounded and stoppable.

A :class:`Job` is one ``python -m fedchain.cli COMMAND ...`` process in its own process
group (so stopping it also stops whatever it started, e.g. a local Ray instance), its
output in ``RUNS/.dashboard/jobs/ID.log``. :class:`JobManager` refuses bad input with the
CLI's own one-line error before starting anything (:func:`fedchain.options.check_command`),
limits how many jobs run at once, stops a job by PID on request (SIGTERM to the group, then
SIGKILL after a grace period), stops every job past its time limit, and stops them all when
the dashboard stops. Processes get SIGTERM if the dashboard dies without cleaning up
(``setpriv --pdeathsig`` where util-linux has it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds between SIGTERM and SIGKILL when a job is stopped.
STOP_GRACE_SECONDS = 5.0
#: Lines of a job's log the control panel shows.
LOG_TAIL_LINES = 12
_RUN_DIR = re.compile(r"run directory: (.+)$")


@dataclass
class Job:
    """One started command and what became of it."""

    id: str
    argv: list[str]
    pid: int
    started: float
    deadline: float
    log_path: Path
    state: str = "running"  # running | finished | failed | stopped | timed out
    returncode: int | None = None
    ended: float | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Values redacted from everything shown (the secrets the job got in its environment).
    secrets: list[str] = field(default_factory=list, repr=False)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        # A progress line rewritten with "\r" shows its last state.
        out = [self.redact(ln.rsplit("\r", 1)[-1]) for ln in text.splitlines()]
        return [ln for ln in out if ln.strip()][-lines:]

    def run_dirs(self) -> list[str]:
        """Where the command writes: an experiment's ``--out``, and the run directories a
        demo or scenario run announced ("run directory: PATH")."""
        out = []
        if self.argv[:1] == ["experiment"] and "--out" in self.argv[:-1]:
            out.append(self.argv[self.argv.index("--out") + 1])
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return out
        text = self.redact(text)
        return out + [m.group(1).strip() for ln in text.splitlines() if (m := _RUN_DIR.search(ln))]

    def error(self) -> str | None:
        """The CLI's one-line error of a job that exited with status 2 (bad input)."""
        if self.returncode != 2:
            return None
        errors = [ln for ln in self.log_tail(50) if ": error: " in ln]
        return errors[-1] if errors else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "argv": [self.redact(a) for a in self.argv],
            "command": self.redact(command_line(self.argv)),
            "pid": self.pid,
            "started": self.started,
            "ended": self.ended,
            "deadline": self.deadline,
            "state": self.state,
            "returncode": self.returncode,
            "error": self.error(),
            "run_dirs": self.run_dirs(),
            "log": self.log_tail(),
        }


def command_line(argv: list[str]) -> str:
    """``fedchain ARGV`` as a shell would need it (quoted: safe to paste)."""
    return shlex.join(["fedchain", *argv])


class JobError(Exception):
    """A job could not be started or found: the message is one line for the page."""


def _pdeathsig_prefix() -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


class JobManager:
    """Starts, watches and stops the control panel's processes."""

    def __init__(
        self,
        runs: Path,
        *,
        timeout: float = 3600.0,
        max_jobs: int = 2,
        python: str = sys.executable,
        cwd: Path | None = None,
    ) -> None:
        self.runs = runs
        self.timeout = timeout
        self.max_jobs = max_jobs
        self.python = python
        self.cwd = cwd or Path.cwd()
        self.jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self.log_dir = runs / ".dashboard" / "jobs"

    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "running"]

    def start(
        self, argv: list[str], *, checked: bool = False, env: dict[str, str] | None = None
    ) -> Job:
        """Check ``argv`` as the CLI would (unless ``checked``), then start it; ``env`` adds
        environment variables (secrets: never on the command line, redacted from the log
        tail, the job's record and its errors).

        Raises ``JobError`` with the CLI's one-line error for bad input.
        """
        extra = dict(env or {})
        if not checked:
            from fedchain.options import check_command

            problem = check_command(argv, {**os.environ, **extra})
            if problem is not None:
                raise JobError(problem)
        self.poll()
        if len(self.running()) >= self.max_jobs:
            raise JobError(
                f"{len(self.running())} processes already running (the limit is --max-jobs "
                f"{self.max_jobs}): stop one first"
            )
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{next(self._ids)}"
        log_path = self.log_dir / f"{job_id}.log"
        environ = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
        command = [*_pdeathsig_prefix(), self.python, "-m", "fedchain.cli", *argv]
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            log.write(f"$ {command_line(argv)}\n".encode())
            log.flush()
            # Popen from the event loop's thread: pdeathsig follows the thread that forked.
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=environ,
                start_new_session=True,
            )
        now = time.time()
        job = Job(
            job_id,
            list(argv),
            proc.pid,
            now,
            now + self.timeout,
            log_path,
            proc=proc,
            secrets=[v for v in extra.values() if v],
        )
        self.jobs[job_id] = job
        return job

    def get(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise JobError(f"no job {job_id!r}")
        return self.jobs[job_id]

    def poll(self) -> bool:
        """Collect exit statuses and stop jobs past their deadline; True if any changed."""
        changed = False
        now = time.time()
        for job in self.running():
            rc = job.proc.poll() if job.proc is not None else None
            if rc is not None:
                job.returncode = rc
                job.ended = now
                job.state = "finished" if rc == 0 else "failed"
                changed = True
            elif now > job.deadline:
                self._terminate(job)
                job.state = "timed out"
                changed = True
        return changed

    def stop(self, job_id: str) -> Job:
        """Stop a running job (SIGTERM to its process group, SIGKILL after the grace)."""
        job = self.get(job_id)
        if job.state == "running":
            self._terminate(job)
            job.state = "stopped"
        return job

    def _terminate(self, job: Job) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline:
            if job.proc is not None and job.proc.poll() is not None:
                break
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):  # children that ignored SIGTERM
            os.killpg(job.pid, signal.SIGKILL)
        if job.proc is not None:
            try:
                job.returncode = job.proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                job.returncode = None
        job.ended = time.time()

    def shutdown(self) -> list[str]:
        """Stop every running job (the dashboard is stopping); their ids."""
        stopped = []
        for job in self.running():
            self._terminate(job)
            job.state = "stopped"
            stopped.append(job.id)
        return stopped
