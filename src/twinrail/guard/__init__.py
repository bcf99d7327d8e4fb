"""twinrail-guard: the inference service's watchdog and memory guard.

llama-server cannot be trusted with the cluster's health: a worker killed
makes it abort (open streams just stop), a worker paused or cut off makes it
hang while /health still says 200. So:

``agent`` (each worker, on each rail address): answers GET /status with the
node's memory (cgroup-aware) and the state of the ggml-rpc-server bound to
each rail address (running, stopped, gone, port not listening).

``proxy`` (the master, between nginx and llama-server): polls every worker's
agent on every rail; when one does not answer in time or reports its RPC
server not running, new requests get HTTP 503 with the reason and in-flight
ones are ended (503 before the response started, an SSE error event after).
Once every worker answers again it probes llama-server with a one-token
completion and, when llama-server stays hung while every worker is back,
kills it so systemd restarts it (its ExecStartPre waits for the workers).
Memory: past the soft watermark on any node new requests are refused and
only one generation is let through at a time; past the hard one queued
requests fail at once too.

``memory``: print the node's memory as JSON (what the watermarks are shares of).

Standard library only: it runs with the node's python3.
"""
