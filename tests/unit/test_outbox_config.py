"""The outbox relay's settings and table names, without services."""

from __future__ import annotations

import pytest

from noetl.errors import ConfigError
from noetl.outbox import RelayConfig, create_table_sql, outbox_table


@pytest.mark.parametrize("name", ["outbox", "app.outbox", "_o2"])
def test_table_names_may_carry_a_schema(name: str) -> None:
    assert outbox_table(name).as_string(None) == ".".join(f'"{p}"' for p in name.split("."))


@pytest.mark.parametrize("name", ["", "x; DROP TABLE y", "a.b.c", "1outbox", "o-b"])
def test_other_table_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid outbox table name"):
        outbox_table(name)
    with pytest.raises(ConfigError):
        RelayConfig(table=name)


def test_the_table_sql_names_the_table_and_its_index() -> None:
    text = create_table_sql("app.outbox").as_string(None)
    assert 'CREATE TABLE IF NOT EXISTS "app"."outbox"' in text
    assert '"app_outbox_pending_idx" ON "app"."outbox"' in text
    assert "CHECK (status IN ('pending', 'sent', 'dead'))" in text


def test_subjects_go_under_the_prefix() -> None:
    assert RelayConfig(subject_prefix="outbox").subject("orders.placed") == ("outbox.orders.placed")
    assert RelayConfig(subject_prefix="").subject("orders.placed") == "orders.placed"


@pytest.mark.parametrize("field", ["batch", "max_attempts"])
def test_batch_and_attempts_are_at_least_one(field: str) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        RelayConfig(**{field: 0})  # type: ignore[arg-type]
