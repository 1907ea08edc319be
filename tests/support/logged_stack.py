"""What the live stacks of the proof and the conversation tests share: every service's output kept
in a log file of its own, a Rasa server loaded in the background while the rest starts, and a close
that stops everything, Rasa first, even while it is still loading. Rasa runs as `make up` runs it: the
REST channel behind a bearer token, the HTTP API behind another, the chat page's socket.io behind
signed tokens (`access` holds all three)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

from tests.support import procs


class LoggedStack:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.services = procs.Services()
        self.rasa: procs.ServiceProcess | None = None
        self._rasa_thread: threading.Thread | None = None
        self._rasa_error: BaseException | None = None
        self._starts: dict[str, int] = {}
        self.access = procs.RasaAccess.generate()

    def allow_pages(self, *ports: int) -> None:
        """Let chat pages on these ports of the loopback connect to the Rasa server (before it starts)."""
        origins = tuple(origin for port in ports for origin in procs.page_origins(port))
        self.access = replace(self.access, page_origins=origins)

    def logged(self, service: procs.ServiceProcess) -> procs.ServiceProcess:
        """Keep the service's output in workdir/logs/<name>[-n].log (n counts restarts)."""
        count = self._starts.get(service.name, 0) + 1
        self._starts[service.name] = count
        service.log_path.unlink(missing_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        service.log_path = self.logs / f"{service.name}{'' if count == 1 else f'-{count}'}.log"
        service.keep_log = True
        return service

    def start_logged(self, service: procs.ServiceProcess) -> procs.ServiceProcess:
        return self.services.start(self.logged(service))

    def start_rasa_in_background(
        self, endpoints: Path, *, credentials: Path | None = None, extra_env: dict[str, str] | None = None
    ) -> None:
        """Start loading a Rasa server on the current model (tens of seconds); see wait_for_rasa.
        ``credentials``: another credentials.yml than the example bot's, ``extra_env`` what it reads."""
        self.rasa = self.logged(
            procs.rasa_server(
                model=procs.current_model(),
                endpoints=endpoints,
                access=self.access,
                credentials=credentials,
                extra_env=extra_env,
            )
        )
        rasa = self.rasa

        def load() -> None:
            try:
                rasa.start()
            except BaseException as exc:  # reported by wait_for_rasa; a stop() mid-start lands here too
                self._rasa_error = exc

        self._rasa_thread = threading.Thread(target=load, name="rasa-start", daemon=True)
        self._rasa_thread.start()

    def wait_for_rasa(self) -> str:
        assert self._rasa_thread is not None and self.rasa is not None
        self._rasa_thread.join()
        if self._rasa_error is not None:
            raise self._rasa_error
        return self.rasa.url

    def close(self) -> None:
        """Stop everything started, Rasa first (even while it is still loading), then newest first."""
        thread, rasa = self._rasa_thread, self.rasa
        if rasa is not None:
            rasa.close()
            # The loader thread may have spawned Rasa just after that stop: stop it again.
            for _ in range(3):
                if thread is None or not thread.is_alive():
                    break
                thread.join(timeout=2.0)
                rasa.close()
        self.services.close()
