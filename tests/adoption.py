"""`python -m tests.adoption` (`make adoption`): a bot nobody here wrote adopts the plugin.

In a temporary folder, as a stranger would:

1. Rasa's starter bot, written by Rasa's own scaffold (`rasa.cli.scaffold.create_initial_project`,
   what `rasa init --no-prompt` runs before it trains);
2. `mcp-bridge init`, one skill whose confirmed tool comes from an MCP server that is not the CRM
   (tests/fixtures/reminder_server.py), the one import in actions/__init__.py, and the intent,
   slot, examples and rule that start the skill (tests/support/bots.py);
3. the bot trained with a smaller config (no TED) and `rasa data validate`, while a fresh Python
   3.10 venv gets the plugin with `pip install -c constraints/venv.txt <a copy of this checkout>`
   (not editable: the distribution, its package data and its command). The installed
   `mcp-bridge init` must then find nothing to change, and `mcp-bridge check` and
   `mcp-bridge check --live` must pass;
4. served: `rasa run --enable-api` (.venv-rasa) and `python -m rasa_sdk --actions actions` (the
   fresh venv); over the REST channel a confirmed reminder is written exactly once and a denied one
   not at all, counted at the MCP server; the starter bot's own test stories still pass
   (`rasa test core --stories tests/ --fail-on-prediction-errors`).

Every server listens on a free port on 127.0.0.1 and is stopped at the end. Exit status 0 only when
every check passes; each step prints when it started and how long it took.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tests.support import procs
from tests.support.bots import add_reminder_skill
from tests.support.http import request_json

T = TypeVar("T")
STOPPING = threading.Event()
REPO = procs.REPO_ROOT
RASA_PYTHON = REPO / ".venv-rasa" / "bin" / "python"
SMALL_CONFIG = """\
# Rasa's default pipeline without TED (the starter's stories are memorised; rules do the rest).
recipe: default.v1
assistant_id: adoption_test
language: en
pipeline:
  - name: WhitespaceTokenizer
  - name: RegexFeaturizer
  - name: LexicalSyntacticFeaturizer
  - name: CountVectorsFeaturizer
  - name: CountVectorsFeaturizer
    analyzer: char_wb
    min_ngram: 1
    max_ngram: 4
  - name: DIETClassifier
    epochs: 100
  - name: EntitySynonymMapper
policies:
  - name: MemoizationPolicy
  - name: RulePolicy
"""
# What a copy of the checkout leaves out: environments, outputs, caches.
_NOT_COPIED = {
    ".git",
    ".venv",
    ".venv-rasa",
    "models",
    "var",
    "results",
    "bench-results",
    "build",
    "node_modules",
}


class Failed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


class Steps:
    """Named steps, some run in parallel: each prints when it ends, when it started and how long it took."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timings: list[tuple[str, float, float]] = []

    def run(self, name: str, step: Callable[[], T]) -> T:
        start = time.monotonic()
        try:
            return step()
        finally:
            end = time.monotonic()
            self.timings.append((name, start - self.started, end - start))
            print(f"  at {start - self.started:5.0f} s, {end - start:5.1f} s: {name}", flush=True)

    def total(self) -> float:
        return time.monotonic() - self.started


def sh(
    args: Sequence[str | Path],
    *,
    cwd: Path,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 300,
) -> str:
    """Run a command; its output, or Failed with the output when it exits non-zero."""
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=procs.child_env({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore", **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise Failed(f"`{' '.join(map(str, args))}` exited {result.returncode} in {cwd}:\n{output[-4000:]}")
    return output


def scaffold(bot: Path) -> None:
    """Rasa's own scaffold code (`rasa init` calls it before it trains)."""
    code = "import sys; from rasa.cli.scaffold import create_initial_project as c; c(sys.argv[1])"
    sh([RASA_PYTHON, "-c", code, bot], cwd=bot.parent, timeout=120)
    wrote = (bot / "domain.yml").exists() and (bot / "tests").is_dir()
    check(wrote, f"{bot}: Rasa's scaffold wrote no bot")


def fresh_venv(venv: Path, source: Path) -> Path:
    """A new Python 3.10 venv with the plugin pip-installed from a copy of this checkout."""
    shutil.copytree(REPO, source, ignore=lambda folder, names: [n for n in names if _skip(Path(folder), n)])
    python310 = sh([REPO / "scripts" / "find-python310.sh"], cwd=REPO).strip().splitlines()[-1]
    sh([python310, "-m", "venv", venv], cwd=venv.parent)
    pip: list[str | Path] = [
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-compile",  # the action server compiles what it imports; a CI run needs no more
    ]
    sh([*pip, "-c", REPO / "constraints" / "venv.txt", source], cwd=venv.parent, timeout=600)
    check((venv / "bin" / "mcp-bridge").exists(), "pip installed no `mcp-bridge` command")
    return venv


def _skip(folder: Path, name: str) -> bool:
    return (folder == REPO and name in _NOT_COPIED) or name == "__pycache__" or name.endswith(".egg-info")


def reminder_server() -> procs.ServiceProcess:
    port = procs.free_port()
    base = f"http://{procs.HOST}:{port}"
    return procs.ServiceProcess(
        "reminders-mcp",
        [sys.executable, str(REPO / "tests" / "fixtures" / "reminder_server.py"), "--port", str(port)],
        env=procs.child_env(),
        ready_url=f"{base}/writes",
        url=f"{base}/mcp",
    )


def writes(server: procs.ServiceProcess) -> list[str]:
    status, body = request_json("GET", procs.base_url(server.url) + "/writes")
    check(status == 200, f"GET /writes answered {status}")
    texts: list[str] = body["texts"]
    return texts


class Chat:
    def __init__(self, rasa_url: str) -> None:
        self.url = f"{rasa_url}/webhooks/rest/webhook"
        self.sender = f"adoption-{uuid.uuid4().hex[:8]}"

    def say(self, text: str) -> list[dict[str, Any]]:
        status, replies = request_json("POST", self.url, {"sender": self.sender, "message": text})
        check(status == 200 and isinstance(replies, list), f"REST channel answered {status}: {replies!r}")
        print(f"      > {text}")
        for reply in replies:
            buttons = " ".join(f"[{b['title']}]" for b in reply.get("buttons") or [])
            print(f"      < {reply.get('text', '')} {buttons}".rstrip())
        return list(replies)


def texts(replies: list[dict[str, Any]]) -> list[str]:
    return [str(reply.get("text", "")) for reply in replies]


def converse(rasa: procs.ServiceProcess, mcp: procs.ServiceProcess) -> None:
    check(writes(mcp) == [], "the reminder server had writes before any conversation")

    confirmed = Chat(rasa.url)
    asked = confirmed.say("remind me to water the plants")
    check(
        texts(asked) == ['Save the reminder "remind me to water the plants"?'],
        f"expected the confirmation question, got {texts(asked)}",
    )
    payloads = [button["payload"] for button in asked[0].get("buttons") or []]
    check(sorted(payloads) == ["/affirm", "/deny"], f"the question's buttons: {payloads}")
    check(writes(mcp) == [], "written before the person said yes")
    check(texts(confirmed.say("yes")) == ["Reminder saved."], "a typed yes did not save the reminder")
    check(writes(mcp) == ["remind me to water the plants"], f"after one yes the server has {writes(mcp)}")
    confirmed.say("yes")  # with nothing pending, a yes is the starter bot's own business
    check(len(writes(mcp)) == 1, "a second yes wrote again")

    denied = Chat(rasa.url)
    check(len(denied.say("remind me to buy milk")) == 1, "no question for the second reminder")
    check(texts(denied.say("no")) == ["OK, no reminder saved."], "a no did not cancel")
    check(writes(mcp) == ["remind me to water the plants"], f"after a no the server has {writes(mcp)}")


def run(work: Path, steps: Steps) -> None:
    bot, venv = work / "bot", work / "venv"
    services = procs.Services()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            try:
                _run(work, bot, venv, pool, services, steps)
            except BaseException:
                STOPPING.set()  # steps still waiting for the training start nothing more
                raise
    finally:
        services.close()


def _run(
    work: Path, bot: Path, venv: Path, pool: ThreadPoolExecutor, services: procs.Services, steps: Steps
) -> None:
    """Two lines of work meet at the conversation: the venv (install, check, action server) and
    the bot (scaffold, init, train, Rasa server and the starter's stories)."""
    venv_ready = pool.submit(
        steps.run, "fresh venv + pip install the plugin", lambda: fresh_venv(venv, work / "src")
    )
    mcp = services.start(reminder_server())
    env = {"REMINDERS_MCP_URL": mcp.url}
    steps.run("Rasa's scaffold writes the starter bot", lambda: scaffold(bot))

    # The bot is adopted with this checkout's command so that training overlaps the venv's
    # install; the installed command then runs init again, which must find nothing to change (the
    # same plugin from the distribution, its package data included), and checks the bot.
    def adopt() -> None:
        here = [sys.executable, "-m", "mcp_bridge.cli"]
        print("      " + sh([*here, "init"], cwd=bot).strip().replace("\n", "\n      "))
        add_reminder_skill(bot)
        sh([*here, "init"], cwd=bot)  # adds the skill's action to the domain
        (bot / "config.yml").write_text(SMALL_CONFIG)

    steps.run("mcp-bridge init, a skill, the one import", adopt)
    action_port, rasa_port = procs.free_port(), procs.free_port()
    endpoints = bot / "endpoints.yml"
    endpoints.write_text(
        endpoints.read_text().replace(
            'url: "http://localhost:5055/webhook"', f'url: "http://{procs.HOST}:{action_port}/webhook"'
        )
    )
    rasa = [str(REPO / ".venv-rasa" / "bin" / "rasa")]
    model = bot / "models" / "adopted.tar.gz"
    train = [*rasa, "train", "--fixed-model-name", "adopted", "--out", "models"]
    trained = pool.submit(steps.run, "rasa train", lambda: sh(train, cwd=bot, timeout=600))
    validated = pool.submit(steps.run, "rasa data validate", lambda: sh([*rasa, "data", "validate"], cwd=bot))
    server = procs.ServiceProcess(
        "rasa-server",
        [*rasa, "run", "--enable-api", "--model", str(model), "--endpoints", "endpoints.yml"]
        + ["--credentials", "credentials.yml", "-i", procs.HOST, "-p", str(rasa_port)],
        env=procs.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"}),
        ready_url=f"http://{procs.HOST}:{rasa_port}/status",
        url=f"http://{procs.HOST}:{rasa_port}",
        start_timeout=procs.RASA_START_TIMEOUT,
        log_path=work / "rasa-server.log",
        cwd=bot,
    )
    test_core: list[str | Path] = [
        *rasa,
        "test",
        "core",
        "--model",
        model,
        "--stories",
        "tests/",
        "--fail-on-prediction-errors",
    ]

    def after_training(name: str, step: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            trained.result()
            if STOPPING.is_set():
                raise Failed(f"{name}: not started, an earlier step failed")
            return steps.run(name, step)

        return run

    serving = pool.submit(after_training("Rasa server loads the model", lambda: services.start(server)))
    stories = pool.submit(
        after_training(
            "the starter bot's own test stories (rasa test core)",
            lambda: sh([*test_core, "--out", work / "results"], cwd=bot, timeout=600),
        )
    )

    venv_ready.result()
    tool = [str(venv / "bin" / "mcp-bridge")]
    before = bot_files(bot)
    said = steps.run("the installed mcp-bridge init: nothing to change", lambda: sh([*tool, "init"], cwd=bot))
    check(
        "nothing to change" in said and bot_files(bot) == before,
        f"the installed init changed the bot: {said}",
    )
    print("      " + steps.run("mcp-bridge check", lambda: sh([*tool, "check"], cwd=bot, env=env)).strip())
    live = steps.run("mcp-bridge check --live", lambda: sh([*tool, "check", "--live"], cwd=bot, env=env))
    print("      " + live.strip())
    actions = procs.ServiceProcess(
        "action-server",
        [str(venv / "bin" / "python"), "-m", "rasa_sdk", "--actions", "actions", "--port", str(action_port)],
        env=_without_pythonpath(procs.child_env({**env, "ACTION_SERVER_HOST": procs.HOST})),
        log_path=work / "action-server.log",
        ready_url=f"http://{procs.HOST}:{action_port}/health",
        url=f"http://{procs.HOST}:{action_port}/webhook",
        start_timeout=90,
        cwd=bot,
    )
    steps.run("action server from the fresh venv", lambda: services.start(actions))
    validated.result()
    serving.result()
    steps.run("over the REST channel: yes writes once, no writes nothing", lambda: converse(server, mcp))
    stories.result()


def bot_files(bot: Path) -> dict[str, bytes]:
    """The bot's own files (not the model or Rasa's cache, which training writes meanwhile)."""
    skip = {"models", ".rasa", "results"}
    return {
        str(path.relative_to(bot)): path.read_bytes()
        for path in sorted(bot.rglob("*"))
        if path.is_file() and not skip & set(path.relative_to(bot).parts) and "__pycache__" not in path.parts
    }


def _without_pythonpath(env: dict[str, str]) -> dict[str, str]:
    """The fresh venv must find the plugin it installed, never this checkout."""
    env.pop("PYTHONPATH", None)
    return env


def main() -> int:
    print("adoption test: Rasa's starter bot adopts mcp_bridge from a fresh venv", flush=True)
    steps = Steps()
    work = Path(tempfile.mkdtemp(prefix="mcp-bridge-adoption-"))
    try:
        run(work, steps)
    except (Failed, RuntimeError) as failure:
        print(f"FAILED: {failure}\n(the bot and the logs are kept in {work})", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"adoption test passed in {steps.total():.0f} s (servers stopped, folder removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
