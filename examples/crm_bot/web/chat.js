/*
 * The CRM assistant's chat page, on the signed socket.io channel (mcp_bridge/channels/socketio.py):
 *
 *   page -> page server  POST session (once, on load)    page server -> page  cookie, {proof}
 *   page -> page server  POST token {proof} (the cookie) page server -> page  {token, expiresIn}
 *   page -> Rasa  connect {auth: {token}}                (refused without a valid token)
 *   page -> Rasa  renew_token {token}                    (before the last one expires)
 *   page -> Rasa  session_request {}                     Rasa -> page  session_confirm <conversation id>
 *   page -> Rasa  user_uttered {message}                 Rasa -> page  bot_uttered {text, quick_replies}
 *
 * The rules, first:
 *  - The page never names a conversation. Its server gives it a short-lived token for its browser
 *    session (an HttpOnly cookie and the session's proof, which only this page's script holds, in
 *    localStorage), and the channel takes the conversation from the token. Every connection,
 *    reconnections included, asks for a fresh token, and the open socket gets a new one before the
 *    last expires (the channel closes a socket whose token has expired; the page then reconnects).
 *  - A session is started by the page's script when it loads (POST session), never taken from a
 *    cookie the page did not get together with its proof: a session cookie planted in the browser
 *    has no proof here, so the page starts its own and the planted one is replaced.
 *  - Whatever the assistant or the person wrote is shown with textContent, never parsed as HTML:
 *    a note that contains <script> or <b> shows as those characters.
 *  - A question's buttons work once. A click disables them (and records that) before the payload
 *    is sent, so a double click sends one payload. Anything else the person sends answers the
 *    open question too and disables its buttons.
 *  - The transcript lives in sessionStorage, with the conversation it belongs to. A reload keeps the
 *    browser session, so the token names the same conversation and it carries on, pending
 *    confirmation included, with the open question's buttons still usable. A transcript of another
 *    conversation (the browser session ended) is cleared.
 *  - Nothing is sent unless the channel has confirmed the session. Otherwise the page says that it
 *    was not sent; socket.io-client would buffer it and deliver it whenever the connection came
 *    back, and a "yes" must not arrive minutes after the person gave up on it.
 *  - When the assistant cannot be reached (or stops answering) the page says so.
 */
(function () {
  "use strict";

  var STORE_KEY = "crm-assistant-chat";
  var PROOF_KEY = "crm-assistant-session-proof"; // localStorage: this origin's script alone reads it
  var noAnswerMs = 20000; // config.json's noAnswerSeconds replaces it

  var log = document.getElementById("log");
  var statusLine = document.getElementById("status");
  var notice = document.getElementById("notice");
  var composer = document.getElementById("composer");
  var input = document.getElementById("message");

  // {conversationId: string|null (as the channel confirmed it), messages: [{from: "bot"|"user", text,
  //  buttons: [{title, payload}], answered: bool, chosen: payload|null}]}
  var state = load();
  var ready = false; // the channel confirmed our session on the current connection
  var buttonRows = []; // message index -> the element holding that message's buttons
  var noAnswerTimer = null;
  var socket = null; // made once config.json says where Rasa is
  var noSession = false; // the page's server knows no browser session: only a reload starts one
  var mayStartSession = true; // until the first token: a page load may start a browser session
  var tokenSeconds = 0; // how long the last token is good for
  var renewTimer = null;

  function load() {
    try {
      var saved = JSON.parse(sessionStorage.getItem(STORE_KEY) || "null");
      if (saved && Array.isArray(saved.messages)) return saved;
    } catch (ignored) {
      // A damaged entry starts a new conversation.
    }
    return { conversationId: null, messages: [] };
  }

  function save() {
    sessionStorage.setItem(STORE_KEY, JSON.stringify(state));
  }

  // -- what the person sees ------------------------------------------------------------------

  function setStatus(kind, text) {
    statusLine.className = "status " + kind;
    statusLine.textContent = text;
  }

  function showNotice(text) {
    notice.textContent = text;
    notice.hidden = false;
  }

  function clearNotice() {
    notice.hidden = true;
    notice.textContent = "";
  }

  function render(message, index) {
    var item = document.createElement("li");
    item.className = "msg " + message.from;
    if (message.text) {
      var bubble = document.createElement("p");
      bubble.className = "bubble";
      bubble.textContent = message.text;
      item.appendChild(bubble);
    }
    if (message.buttons && message.buttons.length) {
      var row = document.createElement("div");
      row.className = "buttons";
      message.buttons.forEach(function (button) {
        var element = document.createElement("button");
        element.type = "button";
        element.textContent = button.title;
        element.addEventListener("click", function () {
          choose(index, button);
        });
        row.appendChild(element);
      });
      buttonRows[index] = row;
      item.appendChild(row);
      showAnswered(index);
    }
    log.appendChild(item);
    log.scrollTop = log.scrollHeight;
  }

  function showAnswered(index) {
    var message = state.messages[index];
    var row = buttonRows[index];
    if (!row) return;
    Array.prototype.forEach.call(row.children, function (element, i) {
      element.disabled = Boolean(message.answered);
      element.classList.toggle("chosen", message.chosen === message.buttons[i].payload);
    });
  }

  function add(message) {
    state.messages.push(message);
    save();
    render(message, state.messages.length - 1);
  }

  // -- sending ---------------------------------------------------------------------------------

  function closeOpenQuestions(chosenIndex, payload) {
    state.messages.forEach(function (message, index) {
      if (message.buttons && message.buttons.length && !message.answered) {
        message.answered = true;
        message.chosen = index === chosenIndex ? payload : null;
        showAnswered(index);
      }
    });
  }

  // Sends `message` to the assistant and shows `shown` as the person's turn; false if not sent.
  function send(message, shown, chosenIndex) {
    if (!ready) {
      showNotice("Not sent: the assistant can't be reached right now. Try again once it is connected.");
      return false;
    }
    clearNotice();
    closeOpenQuestions(chosenIndex, message);
    add({ from: "user", text: shown, buttons: [], answered: true, chosen: null });
    socket.emit("user_uttered", { message: message });
    clearTimeout(noAnswerTimer);
    noAnswerTimer = setTimeout(function () {
      showNotice("No answer from the assistant after " + noAnswerMs / 1000 + " s.");
    }, noAnswerMs);
    return true;
  }

  function choose(index, button) {
    // The disabled attribute already stops a second click; the flag also covers a click that
    // was queued before the first one re-rendered.
    if (state.messages[index].answered) return;
    send(button.payload, button.title, index);
  }

  composer.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = input.value.trim();
    if (!text) return;
    if (send(text, text, -1)) input.value = "";
  });

  // -- the channel -----------------------------------------------------------------------------

  state.messages.forEach(render);

  fetch("config.json", { cache: "no-store" })
    .then(function (response) {
      if (!response.ok) throw new Error("config.json: HTTP " + response.status);
      return response.json();
    })
    .then(connect)
    .catch(function (error) {
      setStatus("unreachable", "The page could not load its settings: " + error.message);
    });

  function post(path, body) {
    return fetch(path, {
      method: "POST",
      cache: "no-store",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  }

  function proof() {
    try {
      return localStorage.getItem(PROOF_KEY) || "";
    } catch (ignored) {
      return "";
    }
  }

  // A new browser session from the page's server: its cookie comes with the answer, its proof in it.
  function startSession(sessionPath) {
    return post(sessionPath, {})
      .then(function (response) {
        if (!response.ok) throw new Error("session: HTTP " + response.status);
        return response.json();
      })
      .then(function (body) {
        localStorage.setItem(PROOF_KEY, String(body.proof || ""));
      });
  }

  // A token for this browser session; on a page load without a session of its own, one is started.
  function getToken(config) {
    var sessionPath = config.sessionPath || "session";
    var tokenPath = config.tokenPath || "token";
    function ask() {
      return post(tokenPath, { proof: proof() });
    }
    return ask()
      .then(function (response) {
        if (response.status === 401 && mayStartSession) {
          return startSession(sessionPath).then(ask);
        }
        return response;
      })
      .then(function (response) {
        if (response.status === 401) noSession = true;
        if (!response.ok) throw new Error("token: HTTP " + response.status);
        return response.json();
      })
      .then(function (body) {
        noSession = false;
        mayStartSession = false;
        tokenSeconds = Number(body.expiresIn) || 0;
        return String(body.token);
      });
  }

  // socket.io-client calls this before every connection attempt: a fresh token each time.
  function fetchToken(config) {
    return function (callback) {
      getToken(config)
        .then(function (token) {
          callback({ token: token });
        })
        .catch(function () {
          callback({}); // refused by the channel, and retried
        });
    };
  }

  // Before the socket's token expires, the channel gets a new one on the same socket.
  function scheduleRenewal(config) {
    clearTimeout(renewTimer);
    if (!tokenSeconds) return;
    renewTimer = setTimeout(function () {
      getToken(config)
        .then(function (token) {
          socket.emit("renew_token", { token: token }, function (accepted) {
            if (accepted === true) scheduleRenewal(config);
          });
        })
        .catch(function () {
          // Not renewed: the channel closes the socket when the token expires, and the page reconnects.
        });
    }, tokenSeconds * 600);
  }

  function forget(conversationId) {
    // The browser session ended and the token names another conversation: the old transcript is
    // not this conversation's.
    state = { conversationId: conversationId, messages: [] };
    buttonRows = [];
    log.textContent = "";
    save();
  }

  function connect(config) {
    if (typeof config.noAnswerSeconds === "number") noAnswerMs = config.noAnswerSeconds * 1000;
    // WebSocket only: no cross-origin HTTP polling, so Rasa needs no CORS opening (see docs/getting-started/example-bot.md).
    socket = io(config.socketUrl, {
      path: config.socketPath,
      auth: fetchToken(config),
      transports: ["websocket"],
      reconnectionDelay: 500,
      reconnectionDelayMax: 4000,
      timeout: 5000,
    });

    socket.on("connect", function () {
      setStatus("connecting", "Connected, starting the conversation…");
      socket.emit("session_request", {});
    });

    socket.on("session_confirm", function (conversationId) {
      // The channel names the conversation: the one the token's subject gives.
      var id = typeof conversationId === "string" ? conversationId : "";
      if (id && id !== state.conversationId) {
        if (state.conversationId) forget(id);
        state.conversationId = id;
        save();
      }
      ready = true;
      clearNotice();
      setStatus("connected", "Connected");
      scheduleRenewal(config);
    });

    socket.on("bot_uttered", function (message) {
      clearTimeout(noAnswerTimer);
      if (!notice.hidden && notice.textContent.indexOf("No answer from") === 0) clearNotice();
      var buttons = (message.quick_replies || message.buttons || []).map(function (button) {
        return { title: String(button.title), payload: String(button.payload) };
      });
      var text = typeof message.text === "string" ? message.text : "";
      if (!text && !buttons.length) return; // images, attachments, custom JSON: not used by this bot
      add({
        from: "bot",
        text: text,
        buttons: buttons,
        answered: false,
        chosen: null,
      });
    });

    socket.on("connect_error", function () {
      ready = false;
      if (noSession) {
        setStatus("unreachable", "This conversation has ended. Reload the page to start a new one.");
        return;
      }
      setStatus("unreachable", "Can't reach the assistant. Retrying…");
      // A connection the channel refused (its token could not be had, or had just expired) is not
      // retried by socket.io-client itself; a network failure is.
      if (!socket.active) setTimeout(function () { socket.connect(); }, 2000);
    });

    socket.on("disconnect", function (reason) {
      ready = false;
      clearTimeout(noAnswerTimer);
      clearTimeout(renewTimer);
      // Drop anything socket.io-client buffered: it must not be delivered on reconnection.
      socket.sendBuffer = [];
      setStatus("unreachable", "Lost the connection to the assistant. Reconnecting…");
      // Closed by the channel (its token expired unrenewed): socket.io-client does not reconnect by
      // itself then; a new connection asks for a new token.
      if (reason === "io server disconnect") setTimeout(function () { socket.connect(); }, 500);
    });
  }
})();
