"""Built-in tools: what a worker runs for a task of each kind."""
