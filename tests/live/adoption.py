"""`python -m tests.live.adoption` (`make adoption`, `make adoption-sdk36`): a bot nobody here wrote adopts
the plugin, following docs/ADOPTING.md, at the end of the supported range that runs the test.

The end is the running environment's: its Python minor version and the constraints file that pins
its rasa-sdk (rasa-sdk 3.21 in .venv: constraints/venv.txt, the action server with two worker
processes; rasa-sdk 3.6 in .venv-sdk36: constraints/venv-sdk36.txt, one process). In a temporary
folder, as a stranger would:

1. a fresh venv of the same Python gets rasa-sdk first, then the plugin's wheel, built by
   `pip wheel --no-deps` from a copy of this checkout as git has it (tracked files and new ones that
   are not ignored), where it must leave nothing that `git status` shows; both installs use the
   constraints file, `pip check` must report nothing and rasa-sdk must be left as it was;
2. Rasa's starter bot, written by Rasa's own scaffold (`rasa.cli.scaffold.create_initial_project`,
   what `rasa init --no-prompt` runs before it trains); `mcp-bridge init`, then the guide's steps 3
   to 6 with the guide's own code blocks (tests/support/bots.py): the sample skill renamed (its
   tool comes from tests/fixtures/reminder_server.py, an MCP server that is not the CRM), its
   responses, the server in endpoints.yml, the one import, the intent, slot, examples and rule;
3. the bot trained with a smaller config (no TED) and `rasa data validate --fail-on-warnings`,
   whose only warnings must be the ones step 8 of the guide explains. The installed `mcp-bridge
   init` must find nothing to change; `mcp-bridge tools reminders`, `mcp-bridge check` and
   `mcp-bridge check --live` must pass;
4. served: `rasa run --enable-api` (.venv-rasa, with the plugin's REST channel in place of `rest:`,
   behind a bearer token, and the plugin's wheel installed for it without dependencies, `pip install
   --no-deps --target`, so the shared .venv-rasa stays as it is) and rasa_sdk's own command,
   unmodified, `python -m rasa_sdk --actions actions --port N` (the fresh venv), with
   ACTION_SERVER_SANIC_WORKERS=2 at the rasa-sdk 3.21 end. Over the REST channel, counted at the MCP
   server: a request without the token is refused, a yes writes exactly once, a no and a question
   handed back write nothing, and each of 24 conversations confirmed in a row is saved, first
   without CONFIRMATION_SECRET (the workers share the key drawn at start; the test fails if they do
   not, since a quarter to a half of the yeses reach the other worker), then with it. A question
   asked before a restart without the secret is refused after it; one asked before a restart with
   the same secret is saved after it. Neither Rasa nor the action server logs anything at ERROR
   level, and no log or audit line holds the secrets or a reminder's text. The starter bot's own
   test stories still pass (`rasa test core --stories tests/ --fail-on-prediction-errors`).

Every server listens on a free port on 127.0.0.1 and is stopped at the end. Exit status 0 only when
every check passes; each step prints when it started and how long it took.
"""

from __future__ import annotations

import importlib.metadata
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.support import procs
from tests.support.bots import add_reminder_skill, expected_unused_responses, guide_block, rasa_warnings
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
# How many conversations in a row, each asked and confirmed, per way of running the action server.
# Rasa opens a connection per request, and with two workers that do not share the confirmation key a
# quarter to a half of the yeses reached the other worker and were refused (tried): all 24 saved by
# chance is then less likely than one in a thousand.
CONFIRMED_IN_A_ROW = 24
# What the action server's environment must not inherit from the shell that runs the test: the
# guide's user starts from none of these.
_ACTION_SERVER_SETTINGS = (
    "ACTION_SERVER_HOST",
    "SANIC_HOST",
    "ACTION_SERVER_TOKEN",
    "ACTION_SERVER_SANIC_WORKERS",
    "CONFIRMATION_SECRET",
    "MCP_BRIDGE_PROCESS_SECRET",
    "AUDIT_LOG",
    "SKILLS_DIR",
    "ENDPOINTS",
    "DOMAIN",
    "PYTHONPATH",  # the fresh venv must find the plugin it installed, never this checkout
)
QUESTION = 'Save the reminder "{}"?'
ASKED_AGAIN = "Just to be sure, before I write anything:"
INVALID = "That confirmation no longer matches what I asked about, so nothing was saved. Please start again."


class Failed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


@dataclass(frozen=True)
class End:
    """The end of the supported range this run tests: the running environment's."""

    python: str  # major.minor
    rasa_sdk: str
    constraints: Path
    workers: int  # the action server's worker processes (ACTION_SERVER_SANIC_WORKERS)

    def describe(self) -> str:
        workers = f"{self.workers} worker processes" if self.workers > 1 else "one process"
        return (
            f"rasa-sdk {self.rasa_sdk} on Python {self.python} "
            f"({self.constraints.relative_to(REPO)}; the action server with {workers})"
        )


def pinned(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def this_end() -> End:
    """rasa-sdk as installed here, the constraints file that pins it, this Python's minor version."""
    installed = importlib.metadata.version("rasa-sdk")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    # rasa-sdk 3.21 runs Sanic 25, which serves from worker processes: the test runs two of them.
    for name, workers in (("venv.txt", 2), ("venv-sdk36.txt", 1)):
        constraints = REPO / "constraints" / name
        if pinned(constraints).get("rasa-sdk") == installed:
            return End(python, installed, constraints, workers)
    raise Failed(
        f"rasa-sdk {installed} (in {sys.prefix}) is pinned by neither constraints/venv.txt nor "
        "constraints/venv-sdk36.txt: run the test with .venv/bin/python or .venv-sdk36/bin/python"
    )


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


# -- step 1 of the guide: the wheel, the fresh venv -----------------------------------------------


def checkout_copy(source: Path) -> None:
    """This checkout as a clone of it would be, with today's changes: the files git tracks and the
    new ones it does not ignore (no environments, outputs or caches)."""
    listed = sh(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    for name in sorted(set(filter(None, listed.split("\0")))):
        path = REPO / name
        if path.is_symlink() or not path.is_file():  # a deleted file, or a link to an environment
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, source / name)


def git_status(source: Path, *, ignored: bool = False) -> list[str]:
    what = ["--ignored"] if ignored else ["--untracked-files=all"]
    return sh(["git", "status", "--porcelain", *what], cwd=source).splitlines()


def fresh_venv(end: End, work: Path) -> Path:
    """The guide's step 1: a new venv of this Python, rasa-sdk first, the plugin's wheel built from
    a copy of the checkout (which git must still see as clean), the wheel installed, `pip check`."""
    source, venv, wheels = work / "src", work / "venv", work / "wheels"
    checkout_copy(source)
    sh(["git", "init", "-q"], cwd=source)
    before = git_status(source)
    python = sh([REPO / "scripts" / "find-python.sh", end.python], cwd=REPO).strip().splitlines()[-1]
    sh([python, "-m", "venv", venv], cwd=work)
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip"]
    quiet = ["-q", "--disable-pip-version-check"]
    # --no-compile: the action server compiles what it imports; a CI run needs no more.
    install = [*pip, "install", *quiet, "--no-compile", "-c", end.constraints]
    sh([*install, f"rasa-sdk=={end.rasa_sdk}"], cwd=work, timeout=600)
    sh([*pip, "wheel", *quiet, "--no-deps", "-w", wheels, source], cwd=work, timeout=600)
    built = sorted(wheels.glob("rasa_mcp_bridge-*.whl"))
    check(len(built) == 1, f"pip wheel built {[w.name for w in built]} in {wheels}")
    left = sorted(set(git_status(source)) - set(before))
    check(not left, f"pip wheel left files in the checkout that git does not ignore: {left}")
    ignored = [line[3:] for line in git_status(source, ignored=True) if line.startswith("!! ")]
    print(f"      pip wheel left in the checkout only what git ignores: {', '.join(ignored) or 'nothing'}")
    sh([*install, built[0]], cwd=work, timeout=600)
    checked = sh([*pip, "check"], cwd=work).strip()
    check(checked == "No broken requirements found.", f"pip check: {checked}")
    code = "import importlib.metadata as m; print(m.version('rasa-sdk'))"
    kept = sh([venv / "bin" / "python", "-c", code], cwd=work).strip()
    check(kept == end.rasa_sdk, f"installing the wheel changed rasa-sdk {end.rasa_sdk} to {kept}")
    check((venv / "bin" / "mcp-bridge").exists(), "pip installed no `mcp-bridge` command")
    print(f"      {built[0].name} into Python {end.python}, beside rasa-sdk {kept}; pip check: {checked}")
    return venv


# -- the servers ----------------------------------------------------------------------------------


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


@dataclass
class ActionServers:
    """rasa_sdk's own command from the fresh venv, in the bot's folder, started as the guide says."""

    end: End
    venv: Path
    bot: Path
    port: int
    env: Mapping[str, str]
    work: Path
    services: procs.Services
    started: int = 0

    def start(self, secret: str | None) -> procs.ServiceProcess:
        self.started += 1
        env = {
            key: value
            for key, value in procs.child_env(self.env).items()
            if key not in _ACTION_SERVER_SETTINGS
        }
        if secret:
            env["CONFIRMATION_SECRET"] = secret
        if self.end.workers > 1:
            env["ACTION_SERVER_SANIC_WORKERS"] = str(self.end.workers)
        log = self.work / f"action-server-{self.started}.log"
        health = f"http://{procs.HOST}:{self.port}/health"
        server = procs.ServiceProcess(
            "action-server",
            [str(self.venv / "bin" / "python"), "-m", "rasa_sdk", "--actions", "actions"]
            + ["--port", str(self.port)],
            env=env,
            log_path=log,
            # rasa-sdk 3.21 serves from worker processes: ready when all of them are
            ready_check=lambda: (
                _answers(health) and (self.end.workers == 1 or len(ready_workers(log)) >= self.end.workers)
            ),
            url=f"http://{procs.HOST}:{self.port}/webhook",
            start_timeout=120,
            cwd=self.bot,
        )
        self.services.start(server)
        output = server.output()
        check(f"mcp_bridge: listening on {procs.HOST}" in output, f"the action server's address:\n{output}")
        if self.end.workers > 1:
            workers = ready_workers(log)
            check(
                len(workers) == self.end.workers,
                f"{len(workers)} workers ready ({workers}), not {self.end.workers}",
            )
        return server


def ready_workers(log: Path) -> set[str]:
    """The process ids of the Sanic workers that said they are ready (rasa-sdk 3.21)."""
    try:
        return set(re.findall(r"Worker ready \[(\d+)\]", log.read_text(errors="replace")))
    except FileNotFoundError:
        return set()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


# -- step 10 of the guide: the conversations ------------------------------------------------------


# The REST channel's bearer token for this run (the Rasa server gets it as REST_CHANNEL_TOKEN).
REST_TOKEN = secrets.token_urlsafe(32)
# The key the channels sign who sent each message with, and the action server checks (the guide's
# MCP_BRIDGE_CHANNEL_KEY, given to the Rasa server and the action server alike).
CHANNEL_KEY = secrets.token_urlsafe(32)


def authenticated_rest(bot: Path) -> None:
    """The starter bot's `rest:` channel becomes the plugin's, behind a bearer token: the guide's
    block (step 9, "Rasa's channels")."""
    credentials = bot / "credentials.yml"
    text = credentials.read_text()
    check("\nrest:\n" in text, f"{credentials}: no `rest:` channel to replace")
    channel = guide_block("# credentials.yml: in place of `rest:`").split("\n", 1)[1]
    credentials.write_text(text.replace("\nrest:\n", "\n" + channel, 1))


def plugin_for_rasa(target: Path, wheels: Path) -> None:
    """The plugin's wheel where Rasa finds it, without its dependencies (its channels need none that
    Rasa lacks), in a folder of its own on Rasa's path."""
    (wheel,) = sorted(wheels.glob("rasa_mcp_bridge-*.whl"))
    pip = [RASA_PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    sh([*pip, "--no-deps", "--target", target, wheel], cwd=target.parent, timeout=300)
    check(
        (target / "mcp_bridge" / "channels" / "rest.py").is_file(), "the plugin's channels were not installed"
    )


class Chat:
    def __init__(self, rasa_url: str, *, quiet: bool = False) -> None:
        self.url = f"{rasa_url}/webhooks/rest/webhook"
        self.sender = f"adoption-{uuid.uuid4().hex[:8]}"
        self.quiet = quiet

    def say(self, text: str) -> list[dict[str, Any]]:
        status, replies = request_json(
            "POST",
            self.url,
            {"sender": self.sender, "message": text},
            headers={"Authorization": f"Bearer {REST_TOKEN}"},
        )
        check(status == 200 and isinstance(replies, list), f"REST channel answered {status}: {replies!r}")
        if not self.quiet:
            print(f"      > {text}")
            for reply in replies:
                buttons = " ".join(f"[{b['title']}]" for b in reply.get("buttons") or [])
                print(f"      < {reply.get('text', '')} {buttons}".rstrip())
        return list(replies)


def texts(replies: list[dict[str, Any]]) -> list[str]:
    return [str(reply.get("text", "")) for reply in replies]


class Written:
    """What the reminder server must have written so far, in order."""

    def __init__(self, mcp: procs.ServiceProcess) -> None:
        self.mcp = mcp
        self.expected: list[str] = []
        self.asked: list[str] = []  # every reminder asked about, written or not

    def check(self, when: str) -> None:
        actual = writes(self.mcp)
        check(
            actual == self.expected, f"{when}: the reminder server wrote {actual}, expected {self.expected}"
        )


def ask(chat: Chat, reminder: str, written: Written) -> list[dict[str, Any]]:
    written.asked.append(reminder)
    asked = chat.say(reminder)
    check(
        texts(asked) == [QUESTION.format(reminder)], f"expected the confirmation question, got {texts(asked)}"
    )
    payloads = [button["payload"] for button in asked[-1].get("buttons") or []]
    check(sorted(payloads) == ["/affirm", "/deny"], f"the question's buttons: {payloads}")
    return asked


def guide_conversation(rasa_url: str, written: Written) -> None:
    """Step 10 of the guide: a yes (after a question handed back) writes once, a no writes nothing."""
    written.check("before any conversation")
    status, _ = request_json("POST", f"{rasa_url}/webhooks/rest/webhook", {"sender": "x", "message": "hi"})
    check(status == 401, f"the REST channel answered {status} to a request without its token")
    confirmed = Chat(rasa_url)
    reminder = "remind me to water the plants"
    ask(confirmed, reminder, written)
    written.check("before the person said yes")
    handed_back = texts(confirmed.say("are you a bot?"))
    expected = ["I am a bot, powered by Rasa.", ASKED_AGAIN, QUESTION.format(reminder)]
    check(handed_back == expected, f"a question while one is pending: {handed_back}")
    written.check("after a question handed back")
    check(texts(confirmed.say("yes")) == ["Reminder saved."], "a typed yes did not save the reminder")
    written.expected.append(reminder)
    written.check("after one yes")
    confirmed.say("yes")  # with nothing pending, a yes is the starter bot's own business
    written.check("after a second yes")

    denied = Chat(rasa_url)
    ask(denied, "remind me to buy milk", written)
    check(texts(denied.say("no")) == ["OK, no reminder saved."], "a no did not cancel")
    written.check("after a no")


def confirmed_in_a_row(rasa_url: str, written: Written, how: str) -> None:
    """CONFIRMED_IN_A_ROW conversations, each asked and confirmed: every one must be saved, once."""
    refused = []
    for n in range(CONFIRMED_IN_A_ROW):
        chat = Chat(rasa_url, quiet=True)
        reminder = f"remind me to call supplier {uuid.uuid4().hex[:6]}"
        ask(chat, reminder, written)
        answer = texts(chat.say("yes"))
        if answer == ["Reminder saved."]:
            written.expected.append(reminder)
        else:
            refused.append(f"conversation {n + 1}: {answer}")
    check(
        not refused,
        f"{how}: {len(refused)} of {CONFIRMED_IN_A_ROW} confirmed conversations were not saved (do the "
        f"action server's workers share the confirmation key?): {refused}",
    )
    written.check(how)
    print(f"      {CONFIRMED_IN_A_ROW} conversations, each asked and confirmed: all saved, once ({how})")


def serve_and_converse(rasa: procs.ServiceProcess, written: Written, servers: ActionServers) -> str:
    """The conversations, first without CONFIRMATION_SECRET, then with it; the secret used."""
    workers = f"{servers.end.workers} workers" if servers.end.workers > 1 else "one process"
    first = servers.start(secret=None)
    print(f"      action server 1: no CONFIRMATION_SECRET, {workers}")
    guide_conversation(rasa.url, written)
    confirmed_in_a_row(rasa.url, written, f"no CONFIRMATION_SECRET, {workers}")
    before_restart = Chat(rasa.url)
    ask(before_restart, "remind me to renew my passport", written)
    first.stop()

    secret = secrets.token_hex(32)
    second = servers.start(secret=secret)
    print(f"      action server 2: CONFIRMATION_SECRET set, {workers}")
    refused = texts(before_restart.say("yes"))
    check(refused == [INVALID], f"a yes to a question asked before a restart without the secret: {refused}")
    written.check("a yes to a question asked before a restart without CONFIRMATION_SECRET")
    denied = Chat(rasa.url)
    ask(denied, "remind me to sell the car", written)
    check(texts(denied.say("no")) == ["OK, no reminder saved."], "a no did not cancel")
    written.check("after a no")
    confirmed_in_a_row(rasa.url, written, f"CONFIRMATION_SECRET set, {workers}")
    across = Chat(rasa.url)
    reminder = "remind me to feed the cat"
    ask(across, reminder, written)
    second.stop()

    servers.start(secret=secret)
    print("      action server 3: the same CONFIRMATION_SECRET, after a restart")
    check(texts(across.say("yes")) == ["Reminder saved."], "a yes after a restart with the same secret")
    written.expected.append(reminder)
    written.check("a yes to a question asked before a restart with the same CONFIRMATION_SECRET")
    return secret


def check_logs(work: Path, bot: Path, rasa: procs.ServiceProcess, written: list[str], secret: str) -> None:
    """Normal behaviour logs nothing at ERROR level; no log or audit line holds the secret or a text."""
    action_logs = sorted(work.glob("action-server-*.log"))
    for log in [rasa.log_path, *action_logs]:
        text = log.read_text(errors="replace")
        errors = [
            line for line in text.splitlines() if re.match(r"\S+ \S+ ERROR ", line) or "Traceback" in line
        ]
        check(not errors, f"{log.name} has lines at ERROR level: {errors[:5]}")
        check(secret not in text, f"{log.name} holds CONFIRMATION_SECRET")
        check(REST_TOKEN not in text, f"{log.name} holds the REST channel's token")
        check(CHANNEL_KEY not in text, f"{log.name} holds the channel key")
    audit = bot / "var" / "audit.jsonl"
    check(audit.is_file(), f"no audit trail at {audit} (the guide's step 9 announces it)")
    for log in [audit, *action_logs]:
        text = log.read_text(errors="replace")
        check(secret not in text, f"{log.name} holds CONFIRMATION_SECRET")
        held = [reminder for reminder in written if reminder in text]
        check(not held, f"{log} holds a reminder's text: {held[:3]}")


# -- the whole run --------------------------------------------------------------------------------


def run(end: End, work: Path, steps: Steps) -> None:
    bot = work / "bot"
    services = procs.Services()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            try:
                _run(end, work, bot, pool, services, steps)
            except BaseException:
                STOPPING.set()  # steps still waiting for the training start nothing more
                raise
    finally:
        services.close()


def _run(
    end: End, work: Path, bot: Path, pool: ThreadPoolExecutor, services: procs.Services, steps: Steps
) -> None:
    """Two lines of work meet at the conversation: the venv (wheel, install, check, action server)
    and the bot (scaffold, init, train, Rasa server and the starter's stories)."""
    venv_ready = pool.submit(
        steps.run,
        "fresh venv, rasa-sdk, the wheel built and installed, pip check",
        lambda: fresh_venv(end, work),
    )
    mcp = services.start(reminder_server())
    # step 4: exported before anything needs it; the channel key as the guide's "Rasa's channels" says
    env = {"REMINDERS_MCP_URL": mcp.url, "MCP_BRIDGE_CHANNEL_KEY": CHANNEL_KEY}
    steps.run("Rasa's scaffold writes the starter bot", lambda: scaffold(bot))

    # The bot is adopted with this checkout's command so that training overlaps the venv's
    # install; the installed command then runs init again, which must find nothing to change (the
    # same plugin from the distribution, its package data included), and checks the bot.
    def adopt() -> None:
        here = [sys.executable, "-m", "mcp_bridge.cli"]
        print("      " + sh([*here, "init"], cwd=bot).strip().replace("\n", "\n      "))
        add_reminder_skill(bot)  # steps 3 to 6, with the guide's code blocks
        sh([*here, "init"], cwd=bot)  # adds the skill's action to the domain
        (bot / "config.yml").write_text(SMALL_CONFIG)
        authenticated_rest(bot)

    steps.run("mcp-bridge init, the guide's steps 3 to 6", adopt)
    action_port, rasa_port = procs.free_port(), procs.free_port()
    endpoints = bot / "endpoints.yml"
    default_url = 'url: "http://localhost:5055/webhook"'
    check(default_url in endpoints.read_text(), f"init wrote no action_endpoint with {default_url}")
    # Another port, as the guide says: the URL here, and --port for the action server.
    endpoints.write_text(
        endpoints.read_text().replace(default_url, default_url.replace("5055", str(action_port)))
    )
    rasa = [str(REPO / ".venv-rasa" / "bin" / "rasa")]
    model = bot / "models" / "adopted.tar.gz"
    train = [*rasa, "train", "--fixed-model-name", "adopted", "--out", "models"]
    # Rasa's own training cache, kept in var/: both ends train the same starter bot with the same Rasa
    # (.venv-rasa), so the second end's `rasa train` reuses what the first computed (Rasa fingerprints
    # the config, the data and each component; anything changed is trained again).
    cache = {"RASA_CACHE_DIRECTORY": str(REPO / "var" / "adoption-rasa-cache")}
    trained = pool.submit(steps.run, "rasa train", lambda: sh(train, cwd=bot, env=cache, timeout=600))

    def validate() -> None:
        # Rasa's warnings, as a person sees them (no PYTHONWARNINGS=ignore)
        output = sh([*rasa, "data", "validate", "--fail-on-warnings"], cwd=bot, env={"PYTHONWARNINGS": None})
        unused, other = rasa_warnings(output)
        check(other == [], f"rasa data validate warned about more than the guide says: {other}")
        expected = expected_unused_responses()
        check(
            unused == expected,
            f"'not used in any story or rule': {sorted(unused)}, expected {sorted(expected)}",
        )
        print(f"      rasa data validate: only the {len(unused)} warnings the guide's step 8 explains")

    validated = pool.submit(steps.run, "rasa data validate --fail-on-warnings", validate)
    rasa_site = work / "rasa-site"

    def channel_for_rasa() -> None:
        venv_ready.result()  # the wheel is built
        steps.run(
            "the plugin into Rasa's environment (pip install --no-deps)",
            lambda: plugin_for_rasa(rasa_site, work / "wheels"),
        )

    rasa_has_channel = pool.submit(channel_for_rasa)
    server = procs.ServiceProcess(
        "rasa-server",
        [*rasa, "run", "--enable-api", "--model", str(model), "--endpoints", "endpoints.yml"]
        + ["--credentials", "credentials.yml", "-i", procs.HOST, "-p", str(rasa_port)],
        env=procs.child_env(
            {
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "PYTHONPATH": str(rasa_site),
                "REST_CHANNEL_TOKEN": REST_TOKEN,
                "MCP_BRIDGE_CHANNEL_KEY": CHANNEL_KEY,
            }
        ),
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

    def serve() -> procs.ServiceProcess:
        rasa_has_channel.result()
        return services.start(server)

    serving = pool.submit(after_training("Rasa server loads the model", serve))
    stories = pool.submit(
        after_training(
            "the starter bot's own test stories (rasa test core)",
            lambda: sh([*test_core, "--out", work / "results"], cwd=bot, timeout=600),
        )
    )

    venv = venv_ready.result()
    tool = [str(venv / "bin" / "mcp-bridge")]
    before = bot_files(bot)
    said = steps.run("the installed mcp-bridge init: nothing to change", lambda: sh([*tool, "init"], cwd=bot))
    check(
        "nothing to change" in said and bot_files(bot) == before,
        f"the installed init changed the bot: {said}",
    )
    listed = steps.run(
        "mcp-bridge tools reminders", lambda: sh([*tool, "tools", "reminders"], cwd=bot, env=env)
    )
    check("create_reminder" in listed, f"mcp-bridge tools reminders:\n{listed}")
    print("      " + steps.run("mcp-bridge check", lambda: sh([*tool, "check"], cwd=bot, env=env)).strip())
    live = steps.run("mcp-bridge check --live", lambda: sh([*tool, "check", "--live"], cwd=bot, env=env))
    print("      " + live.strip())
    servers = ActionServers(end, venv, bot, action_port, env, work, services)
    validated.result()
    serving.result()
    written = Written(mcp)
    secret = steps.run(
        "over the REST channel with its token: a yes writes once, a no nothing; without and with "
        "CONFIRMATION_SECRET",
        lambda: serve_and_converse(server, written, servers),
    )
    check_logs(work, bot, server, written.asked, secret)
    stories.result()


def bot_files(bot: Path) -> dict[str, bytes]:
    """The bot's own files (not the model or Rasa's cache, which training writes meanwhile)."""
    skip = {"models", ".rasa", "results"}
    return {
        str(path.relative_to(bot)): path.read_bytes()
        for path in sorted(bot.rglob("*"))
        if path.is_file() and not skip & set(path.relative_to(bot).parts) and "__pycache__" not in path.parts
    }


def main() -> int:
    try:
        end = this_end()
    except Failed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"adoption test at the {end.describe()}: Rasa's starter bot adopts mcp_bridge", flush=True)
    steps = Steps()
    work = Path(tempfile.mkdtemp(prefix="mcp-bridge-adoption-"))
    try:
        run(end, work, steps)
    except (Failed, RuntimeError) as failure:
        print(f"FAILED: {failure}\n(the bot and the logs are kept in {work})", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    took = f"{steps.total():.0f} s"
    print(f"adoption test passed at the {end.describe()} in {took} (servers stopped, folder removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
