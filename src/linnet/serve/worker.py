"""`EngineWorker`: the engine on a thread of its own, fed by the HTTP server's event loop.

Stage: between the asyncio server and the (single-threaded) `Engine`. Every
engine call runs on the worker's thread: the server hands it closures through a
queue (`submit`, `cancel`), and tokens come back through each request's
`on_token`, which the server points at its own event loop
(`loop.call_soon_threadsafe`), so the engine never waits for a client: a slow or
stalled reader only fills its own queue, bounded by its `max_tokens`. When a step
raises, the worker records the error (`failed`, which turns `/health` to 500),
tells every waiting listener, and stops.

Requests reach an idle engine one HTTP request at a time, milliseconds apart (8
clients starting together arrive over 3-20 ms), while one prefill of a TinyLlama
prompt takes a few hundred: stepping at the first arrival prefills it alone and the
rest together one call later, padded to a power of two, so every weight is read
twice and a padding member is computed for nothing. So when requests arrive at an
idle engine the worker gathers what else arrives within a window before stepping:
`gather` (default a tenth) of the latest prefill call's time, at most `max_gather`
seconds (default 0.05). A lone request waits that long for its first token, a
small cost next to the prefill it waits with; a small model, whose prefill takes
milliseconds, barely waits at all. A busy engine never waits: its next step admits
what has arrived.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from linnet.serve.engine import Engine
from linnet.serve.requests import Request, TokenEvent


class Ticket:
    """One submitted request, as the server sees it."""

    def __init__(self, request: Request, on_failure: Callable[[BaseException], None]) -> None:
        self.request = request
        self.on_failure = on_failure
        self.engine_id: int | None = None
        self.closed = False


class EngineWorker:
    def __init__(self, engine: Engine, *, gather: float = 0.1, max_gather: float = 0.05) -> None:
        self.engine = engine
        self.gather = gather
        self.max_gather = max_gather
        self.failed: BaseException | None = None
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._tickets: set[Ticket] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="linnet-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._commands.put(lambda: None)
        self._thread.join(timeout=30)

    def submit(self, request: Request, on_failure: Callable[[BaseException], None]) -> Ticket:
        """Queue `request` for the engine; its `on_token` runs on the worker's thread."""
        ticket = Ticket(request, on_failure)
        user_callback = request.on_token

        def forward(event: TokenEvent) -> None:
            if event.finished:
                with self._lock:
                    self._tickets.discard(ticket)
            if user_callback is not None:
                user_callback(event)

        request.on_token = forward

        def run() -> None:
            if ticket.closed:
                return
            ticket.engine_id = self.engine.submit(request)

        with self._lock:
            if self.failed is not None:
                on_failure(self.failed)
                return ticket
            self._tickets.add(ticket)
        self._commands.put(run)
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """End the ticket's request (a no-op once it has finished)."""

        def run() -> None:
            ticket.closed = True
            if ticket.engine_id is not None:
                self.engine.cancel(ticket.engine_id)

        self._commands.put(run)

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                idle = not self.engine.busy
                self._drain(block=idle)
                if idle and self.engine.busy:
                    self._gather()
                if self.engine.busy and not self._stopping.is_set():
                    self.engine.step()
        except BaseException as exc:  # the engine is broken: report it, never hang a client
            with self._lock:
                self.failed = exc
                tickets, self._tickets = list(self._tickets), set()
            for ticket in tickets:
                ticket.on_failure(exc)

    def _gather(self) -> None:
        """Run the commands that arrive within the gather window (see the module docstring)."""
        deadline = time.perf_counter() + min(
            self.max_gather, self.gather * self.engine.prefill_seconds
        )
        while not self._stopping.is_set():
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            try:
                command = self._commands.get(timeout=left)
            except queue.Empty:
                return
            command()

    def _drain(self, *, block: bool) -> None:
        try:
            command = self._commands.get(timeout=0.5) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        command()
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command()
