"""The processes of the proof, on free ports on 127.0.0.1, and stopping every one of them.

One CRM REST API over a fresh seeded database, one CRM MCP server with a token, a plain MCP server
named `archive` that serves no CRM tool, one Rasa server (started once: it is the slow one), and
one action server on a fixed port that is restarted with different skill files between phases,
so Rasa's action endpoint never changes.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from tests.proof import variants
from tests.support import procs

ARCHIVE_SERVER = "archive"


class ProofStack:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.db = workdir / "crm.sqlite3"
        self.token = secrets.token_urlsafe(24)
        self.services = procs.Services()
        self.action_port = procs.free_port()
        self.crm: procs.ServiceProcess | None = None
        self.mcp: procs.ServiceProcess | None = None
        self.mcp_port = 0
        self.rasa: procs.ServiceProcess | None = None
        self.actions: procs.ServiceProcess | None = None
        self.endpoints = workdir / "endpoints.yml"
        self.skills: dict[str, Path] = {}
        self._rasa_thread: threading.Thread | None = None
        self._rasa_error: BaseException | None = None
        self._starts: dict[str, int] = {}

    # -- helpers ----------------------------------------------------------------------------------

    def _logged(self, service: procs.ServiceProcess) -> procs.ServiceProcess:
        """Keep the service's output in workdir/logs/<name>[-n].log (kept when the proof fails)."""
        count = self._starts.get(service.name, 0) + 1
        self._starts[service.name] = count
        service.log_path.unlink(missing_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        service.log_path = self.logs / f"{service.name}{'' if count == 1 else f'-{count}'}.log"
        service.keep_log = True
        return service

    def _start(self, service: procs.ServiceProcess) -> procs.ServiceProcess:
        return self.services.start(self._logged(service))

    @property
    def crm_url(self) -> str:
        assert self.crm is not None
        return self.crm.url

    @property
    def mcp_url(self) -> str:
        return f"http://{procs.HOST}:{self.mcp_port}/mcp"

    # -- start-up ---------------------------------------------------------------------------------

    def start_backends(self) -> None:
        """Seed the database, start the CRM, its MCP server and the archive server; write the files."""
        procs.seed_db(self.db)
        self.crm = self._start(procs.crm_rest(self.db))
        self.mcp_port = procs.free_port()
        self.start_mcp()
        archive = self._start(procs.plain_dict_mcp())
        action_url = f"http://{procs.HOST}:{self.action_port}/webhook"
        archive_entry = {"name": ARCHIVE_SERVER, "url": archive.url, "type": "http"}
        variants.write_endpoints(self.endpoints, action_url, [archive_entry])
        self.skills = {
            "mcp": variants.write_skills(self.workdir / "skills-mcp", variants.every_tool("mcp:crm")),
            "local": variants.write_skills(self.workdir / "skills-local", variants.every_tool("local")),
            # The constrained tool is imported from a server that exists but does not serve it.
            "unresolvable": variants.write_skills(
                self.workdir / "skills-unresolvable",
                variants.overrides(
                    "local", {"log_interaction": {"add_timeline_note": f"mcp:{ARCHIVE_SERVER}"}}
                ),
            ),
        }

    def start_rasa_in_background(self) -> None:
        """Start loading the Rasa server (tens of seconds); :meth:`wait_for_rasa` waits for it."""
        self.rasa = self._logged(procs.rasa_server(model=procs.current_model(), endpoints=self.endpoints))

        def start() -> None:
            assert self.rasa is not None
            try:
                self.rasa.start()
            except BaseException as exc:  # reported by wait_for_rasa; a stop() mid-start lands here too
                self._rasa_error = exc

        self._rasa_thread = threading.Thread(target=start, name="rasa-start", daemon=True)
        self._rasa_thread.start()

    def wait_for_rasa(self) -> str:
        assert self._rasa_thread is not None and self.rasa is not None
        self._rasa_thread.join()
        if self._rasa_error is not None:
            raise self._rasa_error
        return self.rasa.url

    # -- changes during the proof -----------------------------------------------------------------

    def use_skills(self, variant: str) -> procs.ServiceProcess:
        """(Re)start the action server on its fixed port with the skill files of ``variant``."""
        if self.actions is not None:
            self.actions.stop()
        self.actions = self._start(
            procs.action_server(
                endpoints=self.endpoints,
                crm_url=self.crm_url,
                mcp_url=self.mcp_url,
                mcp_token=self.token,
                skills_dir=self.skills[variant],
                audit_log=self.workdir / f"audit-{variant}.jsonl",
                port=self.action_port,
            )
        )
        return self.actions

    def stop_mcp(self) -> None:
        assert self.mcp is not None
        self.mcp.stop()

    def start_mcp(self) -> procs.ServiceProcess:
        """Start the CRM MCP server, on the same port every time."""
        self.mcp = self._start(procs.crm_mcp(self.crm_url, token=self.token, port=self.mcp_port))
        return self.mcp

    # -- the end ----------------------------------------------------------------------------------

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
