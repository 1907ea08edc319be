// The approval page: log in, list the calls waiting for your role, approve or refuse each.
// Everything shown is set as text (textContent), never as HTML: a note cannot run a script here.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const REFRESH_MS = 3000;
  let refresh = null;

  function notice(text, ok) {
    const box = $("notice");
    box.textContent = text;
    box.className = ok ? "notice ok" : "notice";
    box.hidden = !text;
  }

  async function api(path, body) {
    const options = body === undefined
      ? { credentials: "same-origin" }
      : { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    const answer = await fetch(path, options);
    let data = {};
    try { data = await answer.json(); } catch (e) { data = {}; }
    return { status: answer.status, data };
  }

  function showLogin(how) {
    clearInterval(refresh);
    if (how === "oidc") {
      $("login").hidden = true;
      $("sso").hidden = false;
      $("queue").hidden = true;
      return;
    }
    $("login").hidden = false;
    $("queue").hidden = true;
    $("who").hidden = true;
    $("logout").hidden = true;
  }

  function showQueue(me) {
    $("login").hidden = true;
    $("sso").hidden = true;
    $("queue").hidden = false;
    $("who").textContent = `${me.user} (${me.roles.join(", ")})`;
    $("who").hidden = false;
    $("logout").hidden = false;
    load();
    clearInterval(refresh);
    refresh = setInterval(load, REFRESH_MS);
  }

  function when(seconds) {
    return new Date(seconds * 1000).toLocaleTimeString();
  }

  function item(request) {
    const li = document.createElement("li");
    li.className = "request";
    li.dataset.id = request.id;
    const title = document.createElement("strong");
    title.textContent = `${request.tool} (${request.skill})`;
    const call = document.createElement("pre");
    call.className = "call";
    call.textContent = JSON.stringify(request.arguments, null, 2);
    const meta = document.createElement("p");
    meta.className = "meta";
    meta.textContent = `Asked by ${request.requester} at ${when(request.created_at)}; expires at ${when(request.expires_at)}; needs: ${request.role}`;
    const actions = document.createElement("div");
    actions.className = "actions";
    for (const [label, approve, cls] of [["Refuse", false, "refuse"], ["Approve", true, "approve"]]) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = cls;
      button.textContent = label;
      button.addEventListener("click", () => decide(request.id, approve));
      actions.append(button);
    }
    li.append(title, call, meta, actions);
    return li;
  }

  async function load() {
    const { status, data } = await api("api/pending");
    if (status === 401) { showLogin(); return; }
    if (status !== 200) { notice("Could not load the requests. Try again in a moment."); return; }
    const list = $("pending");
    list.replaceChildren(...data.pending.map(item));
    $("empty").hidden = data.pending.length > 0;
  }

  async function decide(id, approve) {
    const { status, data } = await api("api/decide", { id, approve });
    if (status === 200) {
      notice(data.decided === "approved" ? "Approved. The requester's conversation is being told." : "Refused. Nothing will be written.", true);
    } else if (status === 401) {
      showLogin();
      return;
    } else {
      notice(data.error || "That did not work.");
    }
    load();
  }

  $("login").addEventListener("submit", async (event) => {
    event.preventDefault();
    const { status, data } = await api("login", { user: $("user").value, password: $("password").value });
    $("password").value = "";
    if (status === 200) { notice(""); showQueue(data); } else { notice(data.error || "Login failed."); }
  });

  $("logout").addEventListener("click", async () => {
    await api("logout", {});
    notice("");
    const { data } = await api("api/me");
    showLogin(data.login);
  });

  api("api/me").then(({ status, data }) => (status === 200 ? showQueue(data) : showLogin(data.login)));
})();
