"""Application layer: runtimes that drive the engine against a store and workers."""
