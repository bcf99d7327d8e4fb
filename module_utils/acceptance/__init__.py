"""The acceptance stage's logic: its client of the serving cluster, the load engine, and the judgements of answers, latency and energy."""
