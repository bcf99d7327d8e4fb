"""The engines twinrail serves with: the registry of engine folders and tables (registry), and each engine's own readers and plans (llamacpp/, vllm/)."""
