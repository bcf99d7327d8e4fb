"""vLLM's own logic: the group's layout (layout), its pinned environment (env), the handshake before a model loads (handshake), and the ranks read from the journals (ranks)."""
