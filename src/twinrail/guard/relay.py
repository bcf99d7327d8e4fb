"""The guard's relay: a request forwarded to llama-server and its answer
back to the client, streamed event by event, cut with a reason when the
guard says the wait is in vain. The handler (handler.py) admits the
request first; the Guard (proxy.py) knows the cluster's state."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time

from twinrail.guard import metrics
from twinrail.guard.web import error_body

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer",
              "upgrade", "proxy-authorization", "proxy-connection", "host"}
# what nginx and the client tell the guard, not llama-server
NOT_FORWARDED = HOP_BY_HOP | {"authorization", "x-twinrail-user", "x-twinrail-proxy"}


def forward(handler, guard, body: bytes | None) -> None:
    """Relay the request to llama-server and its answer back to the
    client through ``handler`` (the client's request handler): a stream
    event by event as it comes (the first event's time kept as the first
    token's), any other answer whole. A wait that the guard says is in vain (a worker
    lost, memory over the hard watermark) or a broken upstream ends the
    answer with the reason: an error event in a stream, a 503 before one."""
    headers = {k: v for k, v in handler.headers.items() if k.lower() not in NOT_FORWARDED}
    conn = http.client.HTTPConnection(*guard.upstream, timeout=10)
    events: queue.Queue = queue.Queue()

    def read_upstream():
        try:
            conn.request(handler.command, handler.path, body=body, headers=headers)
            conn.sock.settimeout(None)
            response = conn.getresponse()
            events.put(("head", response))
            while chunk := response.read1(65536):
                events.put(("data", chunk))
            events.put(("end", None))
        except Exception as exc:  # noqa: BLE001 -- also what closing it under the read raises
            events.put(("error", exc))

    guard.progress()  # admitted: the stall watchdog counts from here
    threading.Thread(target=read_upstream, daemon=True).start()
    streaming, buffered, status, out_headers = False, [], None, []
    try:
        while True:
            try:
                kind, value = events.get(timeout=0.25)
            except queue.Empty:
                reason = guard.abort_reason()  # whatever the request waits for, it waits in vain
                if reason:
                    end_with(handler, reason, streaming)
                    return
                continue
            if kind in ("head", "data"):
                guard.progress()
            if kind == "head":
                status = value.status
                out_headers = [(k, v) for k, v in value.getheaders() if k.lower() not in HOP_BY_HOP]
                if value.getheader("Content-Type", "").startswith("text/event-stream"):
                    streaming = True
                    handler.close_connection = True
                    handler.send_response(status)
                    for key, val in out_headers:
                        handler.send_header(key, val)
                    handler.send_header("Connection", "close")
                    handler.end_headers()
            elif kind == "data":
                if streaming:
                    if handler.first_byte is None:
                        handler.first_byte = time.monotonic()  # the first token's event
                    handler.wfile.write(value)
                    handler.wfile.flush()
                    handler.tail = (handler.tail + value)[-metrics.TAIL_BYTES:]
                else:
                    buffered.append(value)
            elif kind == "end":
                if not streaming:
                    data = b"".join(buffered)
                    handler.tail = data[-metrics.TAIL_BYTES:]
                    handler.send_response(status)
                    for key, val in out_headers:
                        handler.send_header(key, val)
                    handler.send_header("Content-Length", str(len(data)))
                    handler.end_headers()
                    handler.wfile.write(data)
                return
            else:  # the connection to the engine broke
                time.sleep(guard.interval * 2)  # let the monitor find out why
                reason = guard.abort_reason()
                detail = reason or f"{guard.facts['name']} stopped answering ({value})"
                if not reason:
                    guard.upstream_failed(detail)
                end_with(handler, detail, streaming)
                return
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away: closing the upstream cancels its generation
    finally:
        try:
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.close()


def end_with(handler, reason: str, streaming: bool) -> None:
    """End the answer with ``reason``: an error event in a stream already
    begun (counted as a failure), else a refusal."""
    if streaming:
        handler.failure = reason
        handler.wfile.write(b"data: " + json.dumps(error_body(reason)).encode() + b"\n\n")
        handler.wfile.flush()
        handler.close_connection = True
    else:
        handler.refuse(reason)
