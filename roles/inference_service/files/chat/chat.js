// twinrail chat: the conversation is kept in the page and sent whole with
// every turn (multi-turn context); answers stream in as llama-server
// generates them (server-sent events through nginx and twinrail-guard);
// errors (401, 503 with the guard's reason, a stream cut short) are shown.
"use strict";

// Each answer is bounded: a small model can fall into a loop, and without a
// bound it generates until its context slot is full (8192 tokens: minutes on
// the lab, the slot held all that time). Answers cut there say so.
const MAX_TOKENS = 1024;
const messages = [];
const list = document.getElementById("messages");
const input = document.getElementById("input");
const send = document.getElementById("send");
const errorBox = document.getElementById("error");

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "message " + role;
  div.dataset.role = role;
  div.textContent = text;
  list.appendChild(div);
  list.scrollTop = list.scrollHeight;
  return div;
}

function showError(text) {
  errorBox.textContent = text;
  errorBox.hidden = false;
}

async function errorText(response) {
  const body = await response.text();
  try {
    const parsed = JSON.parse(body);
    if (parsed.error && parsed.error.message) return `HTTP ${response.status}: ${parsed.error.message}`;
  } catch (e) { /* not JSON */ }
  return `HTTP ${response.status}: ${body.slice(0, 300) || response.statusText}`;
}

async function ask(text) {
  errorBox.hidden = true;
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const answer = bubble("assistant", "");
  answer.dataset.state = "streaming";
  send.disabled = true;
  let content = "";
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages, stream: true, max_tokens: MAX_TOKENS, timings_per_token: false }),
    });
    if (!response.ok) throw new Error(await errorText(response));
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", finished = false, timings = null, reason = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") { finished = true; continue; }
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(`HTTP ${chunk.error.code || ""}: ${chunk.error.message}`);
          const choice = chunk.choices && chunk.choices[0];
          if (choice && choice.delta && choice.delta.content) {
            content += choice.delta.content;
            answer.textContent = content;
            list.scrollTop = list.scrollHeight;
          }
          if (choice && choice.finish_reason) { finished = true; reason = choice.finish_reason; }
          if (chunk.timings) timings = chunk.timings;
        }
      }
    }
    if (!finished) throw new Error("the answer was cut short: the service stopped mid-stream");
    messages.push({ role: "assistant", content });
    answer.dataset.state = "done";
    if (timings) {
      const stats = document.createElement("span");
      stats.className = "stats";
      stats.textContent = `${timings.predicted_n} tokens, ${timings.predicted_per_second.toFixed(1)} tokens/s`
        + (reason === "length" ? ` (cut at the ${MAX_TOKENS}-token limit)` : "");
      answer.appendChild(stats);
    }
  } catch (err) {
    answer.dataset.state = "failed";
    if (!content) answer.remove();
    messages.pop();  // the turn did not happen: it can be sent again
    showError(err.message);
  } finally {
    send.disabled = false;
    input.focus();
  }
}

document.getElementById("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || send.disabled) return;
  input.value = "";
  ask(text);
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    document.getElementById("composer").requestSubmit();
  }
});
document.getElementById("clear").addEventListener("click", () => {
  messages.length = 0;
  list.replaceChildren();
  errorBox.hidden = true;
});
fetch("/v1/models").then((r) => (r.ok ? r.json() : null)).then((m) => {
  if (m && m.data && m.data[0]) document.getElementById("model").textContent = m.data[0].id;
}).catch(() => {});
