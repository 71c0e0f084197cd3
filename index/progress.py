"""Progress of long steps: a bar on a terminal, a line every few seconds elsewhere.

On a terminal (stderr is a TTY) each step is a tqdm bar. Elsewhere (make, Docker builds, CI logs, the server's
background index build) a step prints ``embedding-index: STEP: 45% (180,000 of 400,000 rows), 1m12s left`` every
``INTERVAL`` seconds, and once when it ends. The lines are on a clock, not on the work: a thread of the step says
where it is every ``INTERVAL`` seconds whether or not the work moved meanwhile (an HNSW graph's block of rows, a
FAISS k-means, a fit that reports nothing), and redraws a bar every ``BAR_SECONDS`` (its elapsed time moves). A
step of unknown length (``total=None``) says how long it has run (``STEP: 25s so far``). ``configure(quiet=True)``
(``--quiet``) turns both off. A step given a ``log`` (the server's own long computations) writes its lines there
instead, and only once it has lasted ``INTERVAL`` seconds: a short one says nothing.
``configure(status_file=...)`` also keeps the latest state of the running step in a small JSON file, which
``embedding-serve`` reads to say what it is building, how far it is and what it has cost so far (its nice level,
elapsed and CPU seconds, and what :func:`record` adds, such as the estimated build time).

A line that cannot be written (nobody reads the stream any more: ``2>&1 | head -1``, a log collector that died, a
closed terminal) is dropped, from a step's clock as from the builder's own thread, and the work goes on: a table is
what a build is run for, and its progress is no reason to throw the table away (a bar is tqdm's, which stops
drawing so). The server's background child (``configure(background=True)``) stops instead, as the server's SIGTERM
stops it: its reader is the server, which reads no more only once it is gone (killed outright), and the next
start builds again. It is sent that SIGTERM as its server dies, too, whether or not it writes a line then
(:func:`stop_with_parent`, on Linux).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    import logging

INTERVAL = 5.0  # seconds between two lines when stderr is not a terminal (0: a line at each step forward, no clock)
BAR_SECONDS = 1.0  # how often a bar is redrawn while its count does not move (its elapsed time, its rate)
_WRITING = threading.Lock()  # one line at a time on the stream, whichever thread writes it
_STATUS = threading.Lock()  # one status file write at a time: a step's clock and the builder's own thread write it


class _Config:
    quiet = False
    status_file: Path | None = None
    interval = INTERVAL
    stream: TextIO | None = None  # None: sys.stderr at the time of writing
    background = False  # the server's child: it stops when its lines cannot be written
    stopping = False  # the background child stops (the server's SIGTERM, or a line unread): no second interrupt
    started = time.monotonic()
    facts: dict[str, Any] = {}  # noqa: RUF012  # one process-wide configuration


CONFIG = _Config()


def configure(
    *,
    quiet: bool | None = None,
    status_file: Path | None = None,
    interval: float | None = None,
    whole_process: bool = False,
    background: bool | None = None,
) -> None:
    """``whole_process``: the build is this process (the command line), so its elapsed seconds count from the
    process's start, imports included; else from now. ``background``: the server's child, whose reader is the
    server (see the module's notes)."""
    if quiet is not None:
        CONFIG.quiet = quiet
    if background is not None:
        CONFIG.background, CONFIG.stopping = background, False
    if status_file is not None:
        CONFIG.status_file = Path(status_file)
        CONFIG.started = time.monotonic() - (_process_age() if whole_process else 0.0)
    if interval is not None:
        CONFIG.interval = interval


def note(message: str) -> None:
    """One line about what the builder does next (silent with ``--quiet``); also the status file's step."""
    if not CONFIG.quiet:
        say(message)
    if CONFIG.status_file is not None:
        step = {"state": "running", "step": message.removesuffix(" ..."), "done": 0.0}
        with _STATUS:  # the state written last is the latest: a step's clock may be writing its own meanwhile
            write_status(CONFIG.status_file, {**step, **cost()})


def warn(message: str) -> None:
    """One line about something the user may want to look at (silent with ``--quiet``, which leaves only errors)."""
    if not CONFIG.quiet:
        say(f"warning: {message}")


def say(text: str) -> None:
    """``embedding-index: TEXT`` on stderr in one write, so that a step's thread never splits another's line; a
    line nobody can read is dropped (see the module's notes)."""
    stream = CONFIG.stream or sys.stderr
    with _WRITING:
        try:
            stream.write(f"embedding-index: {text}\n")
            stream.flush()
        except (OSError, ValueError):  # a pipe without reader (EPIPE), a terminal gone (EIO), a closed file
            unread()


def unread() -> None:
    """A line could not be written: the server's background child stops as at the server's SIGTERM, unless it stops
    already; any other command goes on. The signal itself, to the main thread whichever thread wrote: it wakes a
    main thread waiting (for a thread pool, a thread's end), which an interrupt only asked for would leave waiting."""
    if CONFIG.background and not CONFIG.stopping:
        CONFIG.stopping = True
        main = threading.main_thread().ident
        if main is not None:  # None only before the interpreter started it
            signal.pthread_kill(main, signal.SIGTERM)


def stop(signum: int, frame: FrameType | None) -> NoReturn:
    """The background child's SIGTERM handler: an interrupt (its temporary folder removed, its locks let go), after
    which a line of that cleanup nobody reads (the server killed meanwhile) asks for no second one, which would cut
    the cleanup short."""
    CONFIG.stopping = True
    raise KeyboardInterrupt


# Set by embedding-serve in the environment of the children it starts (service.logs.spawn): its process id.
SERVER_VARIABLE = "EMBEDDING_INDEX_SERVER_PID"
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): the signal a process gets when its parent thread exits


def stop_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent ``parent`` dies, even killed outright; at once if it died already
    (this process then another's child). The parent is the thread that started this process: it must wait for it,
    as the server's threads that start its children do. Linux alone has it (prctl's PR_SET_PDEATHSIG): elsewhere
    nothing changes, and a child outlives a parent killed outright."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def record(**facts: Any) -> None:
    """Facts about the build for its status file from now on (e.g. ``hnsw_estimate_seconds``)."""
    CONFIG.facts.update(facts)


def cost() -> dict[str, Any]:
    """What this build has cost so far: its nice level, elapsed and CPU seconds (all its threads), and its facts."""
    return {
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "elapsed_seconds": round(time.monotonic() - CONFIG.started, 1),
        "cpu_seconds": round(time.process_time(), 1),
        **CONFIG.facts,
    }


def _process_age() -> float:
    """Seconds since this process started, from /proc (0 where there is none)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks after boot
        return max(0.0, float(Path("/proc/uptime").read_text().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """One step of ``total`` units (rows, bytes, epochs): ``advance(n)`` as work gets done; ``total=None`` for a
    step whose length is unknown (its lines say how long it has run).

    Use as a context manager; the closing line (or the bar's last state) is written on exit. While its block runs,
    a thread says where it is every ``CONFIG.interval`` seconds (a line, the bar's refresh, the status file), in
    the context variables of the thread that entered it (a server's request id); :func:`end_clocks` ends those an
    interrupt left running.
    """

    def __init__(self, step: str, total: float | None, unit: str = "rows", log: logging.Logger | None = None) -> None:
        self.step, self.unit, self.log = step, unit, log
        self.total = None if total is None else max(float(total), 0.0)
        self.done = 0.0
        self.started = self.last = time.monotonic()
        self.said = False  # a line was written before the closing one
        self.lines = log is not None or not CONFIG.quiet  # --quiet is the builder's: a log's lines are the server's
        self._saying = threading.Lock()
        stream = CONFIG.stream or sys.stderr
        self._bar: Any = None
        if log is None and not CONFIG.quiet and stream.isatty():
            from tqdm import tqdm

            scale = unit == "bytes"
            self._bar = tqdm(
                total=self.total, desc=step, unit="B" if scale else f" {unit}", unit_scale=scale, file=stream
            )
        self._status({"state": "running"})
        self._ended = threading.Event()
        self._clock: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if (self.lines or CONFIG.status_file is not None) and CONFIG.interval > 0:  # interval 0: each step forward
            # the caller's context variables too: a server's lines name the request they are of
            run = contextvars.copy_context().run
            self._clock = threading.Thread(target=run, args=(self._tick,), name=f"progress: {self.step}", daemon=True)
            with _CLOCKS_HELD:
                _CLOCKS.add(self)
            try:
                self._clock.start()
            except BaseException:  # an interrupt while it starts: the step never began, nor does its clock
                self._end_clock()
                raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._end_clock()
        if kind is None:
            self.done = max(self.done, self.total or 0.0)
        if self._bar is not None:
            if kind is None and self.total is not None:
                self._bar.update(self.total - self._bar.n)
            self._bar.close()
        elif self.lines and kind is None and (self.log is None or self.said):
            self._line(final=True)

    def _end_clock(self) -> None:
        self._ended.set()
        if self._clock is not None and self._clock.is_alive():  # one not yet running ends as it starts
            self._clock.join()
        with _CLOCKS_HELD:
            _CLOCKS.discard(self)

    def advance(self, n: float = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        self._say_if_due(clock=False)

    def _tick(self) -> None:
        """The step's clock: where it is, every interval, whether or not the work moved meanwhile."""
        while True:
            if self._ended.wait(max(0.0, self.last + self._every() - time.monotonic())):
                return
            self._say_if_due(clock=True)

    def _every(self) -> float:
        return min(BAR_SECONDS, CONFIG.interval) if self._bar is not None else CONFIG.interval

    def _say_if_due(self, clock: bool) -> None:
        """A line (a bar's redraw, the status file) if one is due; a step forward to the whole total leaves it to the
        closing line, the clock does not (the work it counted is fed, not done: a training's last jobs)."""
        with self._saying:
            now = time.monotonic()
            if now - self.last < self._every() or self._ended.is_set():
                return
            self.last = now
            if self._bar is not None:
                self._bar.refresh()  # its elapsed time moves even while its count does not
            elif self.lines and (clock or self.total is None or self.done < self.total):
                self._line()
            self._status({"state": "running"})

    def fraction(self) -> float:
        if self.total is None:
            return 0.0
        return min(1.0, self.done / self.total) if self.total else 1.0

    def left(self) -> float | None:
        """Seconds left at the rate so far, or None before any work is done (or when the length is unknown)."""
        fraction = self.fraction()
        if fraction <= 0:
            return None
        return (time.monotonic() - self.started) * (1 - fraction) / fraction

    def _amount(self, value: float) -> str:
        if self.unit == "bytes":
            return f"{value / 2**20:,.0f} MiB"
        return f"{value:,.0f}"

    def _line(self, final: bool = False) -> None:
        elapsed = time.monotonic() - self.started
        if self.total is None:
            text = f"{self.step}: done in {duration(elapsed)}" if final else f"{self.step}: {duration(elapsed)} so far"
        else:
            unit = "" if self.unit == "bytes" else self.unit.removesuffix("s") if self.total == 1 else self.unit
            amount = f"{self._amount(self.done)} of {self._amount(self.total)} {unit}".strip()
            if final:
                text = f"{self.step}: done ({amount}) in {duration(elapsed)}"
            else:
                left = self.left() if self.fraction() < 1 else None  # all counted, not all done: no time left said
                eta = f", {duration(left)} left" if left is not None else f", {duration(elapsed)} so far"
                text = f"{self.step}: {self.fraction():.0%} ({amount}){eta}"
        self.said = True
        if self.log is not None:
            self.log.info("%s", text)
        else:
            say(text)

    def _status(self, extra: dict[str, Any]) -> None:
        if CONFIG.status_file is None or self.log is not None:
            return
        with _STATUS:
            left = self.left()
            write_status(
                CONFIG.status_file,
                {
                    "step": self.step,
                    "done": round(self.fraction(), 4),
                    "seconds_left": None if left is None else round(left, 1),
                    **extra,
                    **cost(),
                },
            )


_CLOCKS: set[Progress] = set()  # the steps whose clock runs
_CLOCKS_HELD = threading.Lock()


def end_clocks() -> None:
    """End every step's clock still running: a step that an interrupt (Ctrl-C, or SIGTERM taken as one) stopped on
    its way out of its block, before its own end ended its clock, writes nothing after the command's last line."""
    with _CLOCKS_HELD:
        running = list(_CLOCKS)
    for step in running:
        step._end_clock()


def write_status(path: Path, status: dict[str, Any]) -> None:
    """Replace the status file in one rename, so a reader never sees half of it (each thread through its own
    temporary file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.write_text(json.dumps(status))
        os.replace(tmp, path)
    except OSError:  # the status is a courtesy: never fail a build over it, nor keep the room it took
        with contextlib.suppress(OSError):
            tmp.unlink()


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None
