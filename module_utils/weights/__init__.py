"""The weights: GGUF headers and figures (gguf_cut, gguf_figures, gguf_tokens), manifests and their sums (sums), and rsync's parallel streams (rsync_streams)."""
