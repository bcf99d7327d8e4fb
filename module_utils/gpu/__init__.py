"""The GPUs of a node as nvidia-smi reports them: the table and query facts and their gate (facts), and each GPU's health (health)."""
