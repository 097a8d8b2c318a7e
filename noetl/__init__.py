"""NoETL-py: a workflow orchestration engine for YAML playbooks."""

__version__ = "0.1.0"
