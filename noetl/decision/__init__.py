"""Deciding from the event log, shared by the server's orchestrator, `noetl run` and a
worker continuing an execution it runs alone: `decider` (load, fold, decide, append, all
in one store transaction), `appends` (what a decision writes), `records` (execution
records), `workloads` (the workload a task's tool sees), `dlq` (dead letters of failed
tasks). Below the runtimes and the worker, above the store and the engine.
"""
