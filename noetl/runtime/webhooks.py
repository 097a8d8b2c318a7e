"""Starting a schedule's playbook from a webhook request, once per idempotency key.

`POST /api/triggers/{schedule}` proves it may with the schedule's own token (made by `POST
/api/schedules/{name}/token`, shown once), not an API token: a system that may start one
playbook can do nothing else. Either the token itself (`Authorization: Bearer`, checked
against its SHA-256) or an HMAC-SHA256 signature of the raw body keyed by the token
(`X-NoETL-Signature: sha256=<hex>`, GitHub's form), which needs the token back: it is kept
encrypted with the credentials key, and only when that key is set. With an `Idempotency-Key`, the
delivery is claimed by that key with the execution id chosen before the execution is
created (the tick's pattern): a repeated request answers the first one's execution, and
a repeat of a request whose server died before it started the execution starts it, with
that same id."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from noetl.auth import hash_secret, new_secret
from noetl.core import ConcurrencyError, NotFoundError
from noetl.credentials.keys import CredentialKeyError, Keyring
from noetl.decision.records import new_execution_id
from noetl.dsl.render import Renderer
from noetl.dsl.triggers import Trigger
from noetl.errors import AuthenticationError, ConflictError
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.scheduler import tick_context
from noetl.store.base import ScheduleRecord

__all__ = [
    "SIGNATURE_PREFIX",
    "TOKEN_PREFIX",
    "Delivery",
    "Proof",
    "deliver",
    "new_webhook_token",
    "start_once",
]

TOKEN_PREFIX = "nwh_"
SIGNATURE_PREFIX = "sha256="


@dataclass(frozen=True, slots=True)
class Proof:
    """What a request offers: its bearer token, or its signature and the raw body signed."""

    token: str | None = None
    signature: str | None = None
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Delivery:
    execution_id: str
    replayed: bool  # a repeat of an idempotency key: the first request's execution


def new_webhook_token(orchestrator: Orchestrator, name: str, keyring: Keyring) -> str:
    """A new token for the schedule's webhook (the old one stops working), kept encrypted
    too when `keyring` has a key (for signatures); NotFoundError when there is no such
    schedule."""
    token = new_secret(TOKEN_PREFIX)
    sealed = None
    if keyring:
        encrypted, key_id = keyring.encrypt(token.encode("ascii"))
        sealed = f"{key_id}:{encrypted}"
    if not orchestrator.store.schedules.set_token(name, hash_secret(token), sealed=sealed):
        raise NotFoundError(f"schedule {name!r} does not exist")
    return token


def _signed(schedule: ScheduleRecord, proof: Proof, keyring: Keyring) -> bool:
    if not proof.signature or not proof.signature.startswith(SIGNATURE_PREFIX):
        return False
    if schedule.token_sealed is None or not keyring:
        return False
    key_id, _, encrypted = schedule.token_sealed.partition(":")
    try:
        token = keyring.decrypt(
            encrypted, what=f"the webhook token of {schedule.name}", made_with=key_id
        )
    except CredentialKeyError:
        return False
    expected = hmac.new(token, proof.raw, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, proof.signature[len(SIGNATURE_PREFIX) :].lower())


def _check(schedule: ScheduleRecord | None, proof: Proof, keyring: Keyring) -> ScheduleRecord:
    # One answer for a missing schedule and a wrong token: a caller learns nothing of
    # which schedules exist.
    denied = AuthenticationError("unknown trigger or wrong token")
    if schedule is None or schedule.token_hash is None:
        raise denied
    if proof.token and hmac.compare_digest(schedule.token_hash, hash_secret(proof.token)):
        return schedule
    if _signed(schedule, proof, keyring):
        return schedule
    raise denied


def deliver(
    orchestrator: Orchestrator,
    name: str,
    proof: Proof,
    body: dict[str, Any],
    *,
    key: str | None,
    now: float,
    keyring: Keyring,
) -> Delivery:
    """Start the schedule's playbook for one webhook request (see the module). The
    workload is the trigger's `workload` rendered with `request.body` (and `tick`, the
    request's time) when it has one, else the body itself."""
    store = orchestrator.store
    schedule = _check(store.schedules.get(name), proof, keyring)
    if schedule.paused:
        raise ConflictError(f"schedule {name!r} is paused")
    trigger = Trigger.model_validate(schedule.spec)
    if store.get_playbook(schedule.playbook_path) is None:  # before the body's templates
        raise NotFoundError(f"playbook {schedule.playbook_path!r} is not registered")
    workload: dict[str, Any] = body
    if trigger.workload:
        context = {**tick_context(schedule, trigger, now, manual=True), "request": {"body": body}}
        workload = Renderer().render(dict(trigger.workload), context, field="workload")
    return start_once(orchestrator, schedule, workload, key=key, now=now)


def start_once(
    orchestrator: Orchestrator,
    schedule: ScheduleRecord,
    workload: dict[str, Any],
    *,
    key: str | None,
    now: float,
) -> Delivery:
    """Start the schedule's playbook with `workload`, once per delivery `key` (None: no
    key, always a new execution): the key is claimed with the execution id chosen before
    the execution starts, so a repeat finds the first one's execution (replayed), and a
    repeat of a delivery whose server died before the start starts it with that id.
    NotFoundError when the playbook is not registered."""
    store = orchestrator.store
    playbook = store.get_playbook(schedule.playbook_path)
    if playbook is None:
        raise NotFoundError(f"playbook {schedule.playbook_path!r} is not registered")
    execution_id, first = new_execution_id(now), True
    if key is not None:
        execution_id, first = store.schedules.claim_delivery(schedule.name, key, execution_id)
        if not first and store.get_execution(execution_id) is not None:
            return Delivery(execution_id, replayed=True)
    try:
        orchestrator.start_execution(
            playbook.text, path=playbook.path, workload=workload, execution_id=execution_id
        )
    except ConcurrencyError:
        return Delivery(execution_id, replayed=True)  # a repeat raced the first delivery
    return Delivery(execution_id, replayed=not first)
