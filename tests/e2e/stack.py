"""The CRM bot's processes for its conversation tests, on free ports on 127.0.0.1.

One CRM REST API over a fresh seeded database, one CRM MCP server (stoppable and restartable on
its port), one Rasa server (the slow one: started once, in the background, while the rest starts),
and one action server on a fixed port, restarted with another variant of the bot between runs so
Rasa's action endpoint never changes. A variant is a skills folder, plus optionally a folder
holding a modified copy of the `actions` package.
"""

from __future__ import annotations

import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.support import procs
from tests.support.conversation import skills_with_source


@dataclass(frozen=True)
class Variant:
    name: str
    skills: Path
    # A folder with an `actions` package that shadows the repository's (None: the real one).
    actions_root: Path | None = None


class E2EStack:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.db = workdir / "crm.sqlite3"
        self.token = secrets.token_urlsafe(24)
        self.services = procs.Services()
        self.action_port = procs.free_port()
        self.mcp_port = procs.free_port()
        self.endpoints = workdir / "endpoints.yml"
        self.crm: procs.ServiceProcess | None = None
        self.mcp: procs.ServiceProcess | None = None
        self.rasa: procs.ServiceProcess | None = None
        self.actions: procs.ServiceProcess | None = None
        self.variant: Variant | None = None
        self._rasa_thread: threading.Thread | None = None
        self._rasa_error: BaseException | None = None
        self._starts: dict[str, int] = {}

    # -- variants -------------------------------------------------------------------------------

    def mcp_tools(self) -> Variant:
        return Variant("mcp", skills_with_source(self.workdir / "skills-mcp", "mcp:crm"))

    def local_tools(self) -> Variant:
        return Variant("local", skills_with_source(self.workdir / "skills-local", "local"))

    def audit_log(self, variant: Variant) -> Path:
        return self.workdir / f"audit-{variant.name}.jsonl"

    # -- start-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start loading Rasa in the background, then the CRM and its MCP server (see wait_for_rasa)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        procs.write_endpoints(self.endpoints, f"http://{procs.HOST}:{self.action_port}/webhook")
        self.rasa = self._logged(procs.rasa_server(model=procs.current_model(), endpoints=self.endpoints))
        self._rasa_thread = threading.Thread(target=self._load_rasa, name="rasa-start", daemon=True)
        self._rasa_thread.start()
        procs.seed_db(self.db)
        self.crm = self.services.start(self._logged(procs.crm_rest(self.db)))
        self.start_mcp()

    def _load_rasa(self) -> None:
        assert self.rasa is not None
        try:
            self.rasa.start()
        except BaseException as exc:  # reported by wait_for_rasa
            self._rasa_error = exc

    def wait_for_rasa(self) -> str:
        assert self._rasa_thread is not None and self.rasa is not None
        self._rasa_thread.join()
        if self._rasa_error is not None:
            raise self._rasa_error
        return self.rasa.url

    @property
    def rasa_url(self) -> str:
        assert self.rasa is not None
        return self.rasa.url

    def use(self, variant: Variant) -> procs.ServiceProcess:
        """(Re)start the action server on its fixed port as ``variant``."""
        assert self.crm is not None
        if self.actions is not None:
            self.actions.stop()
        server = procs.action_server(
            endpoints=self.endpoints,
            crm_url=self.crm.url,
            mcp_url=f"http://{procs.HOST}:{self.mcp_port}/mcp",
            mcp_token=self.token,
            skills_dir=variant.skills,
            audit_log=self.audit_log(variant),
            port=self.action_port,
        )
        if variant.actions_root is not None:
            # `python -m rasa_sdk --actions actions` would find the repository's package first (the
            # working directory leads sys.path); run the same module with the copy's folder in front.
            module = server.args.index("-m")
            launch = f"import sys, runpy; sys.path.insert(0, {str(variant.actions_root)!r}); "
            launch += f"runpy.run_module({server.args[module + 1]!r}, run_name='__main__', alter_sys=True)"
            server.args = [sys.executable, "-c", launch, *server.args[module + 2 :]]
        self.actions = self.services.start(self._logged(server))
        self.variant = variant
        return self.actions

    def stop_mcp(self) -> None:
        assert self.mcp is not None
        self.mcp.stop()

    def start_mcp(self) -> None:
        assert self.crm is not None
        self.mcp = self.services.start(
            self._logged(procs.crm_mcp(self.crm.url, token=self.token, port=self.mcp_port))
        )

    def _logged(self, service: procs.ServiceProcess) -> procs.ServiceProcess:
        """Keep the service's output in workdir/logs/<name>[-n].log."""
        count = self._starts.get(service.name, 0) + 1
        self._starts[service.name] = count
        service.log_path.unlink(missing_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        service.log_path = self.logs / f"{service.name}{'' if count == 1 else f'-{count}'}.log"
        service.keep_log = True
        return service

    def close(self) -> None:
        """Stop everything, Rasa first (even while it is still loading), then newest first."""
        thread, rasa = self._rasa_thread, self.rasa
        if rasa is not None:
            rasa.close()
            for _ in range(3):  # the loader thread may have spawned Rasa just after that stop
                if thread is None or not thread.is_alive():
                    break
                thread.join(timeout=2.0)
                rasa.close()
        self.services.close()
