"""A registered playbook's `triggers:` block, kept as schedules.

Registering a playbook (the API, `noetl playbook register`) creates or updates one
schedule per trigger, named `<path>:<trigger>`, and deletes the schedules an earlier
version of the playbook made whose trigger is gone. A schedule keeps its paused state
and its creation time (where its ticks start) across versions."""

from __future__ import annotations

from noetl.dsl.model import Playbook
from noetl.store.base import ScheduleRecord, Store

__all__ = ["PLAYBOOK_SOURCE", "schedule_name", "sync_playbook_schedules"]

PLAYBOOK_SOURCE = "playbook"


def schedule_name(path: str, trigger: str) -> str:
    """The name of the schedule a playbook's trigger makes."""
    return f"{path}:{trigger}"


def sync_playbook_schedules(store: Store, path: str, playbook: Playbook) -> list[ScheduleRecord]:
    """Make the schedules of `playbook`'s triggers (registered at `path`) match them;
    returns them as stored."""
    kept: list[ScheduleRecord] = []
    for trigger in playbook.triggers:
        spec = trigger.model_dump(mode="json", exclude_defaults=True)
        spec["name"] = trigger.name
        record = ScheduleRecord(
            schedule_name(path, trigger.name), path, spec, PLAYBOOK_SOURCE, trigger.paused
        )
        kept.append(store.schedules.put(record))
    names = {record.name for record in kept}
    for old in store.schedules.all():
        if old.source == PLAYBOOK_SOURCE and old.playbook_path == path and old.name not in names:
            store.schedules.delete(old.name)
    return kept
