"""llama.cpp's own logic: where the layers go (tensor_split), what the RPC workers' logs say of their transport (rpc_transport), and llama-server's timing lines (timings)."""
