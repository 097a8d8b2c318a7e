"""Retries in the embedded runtime: a failed attempt runs again after its delay."""

from __future__ import annotations

from pathlib import Path

from noetl.dsl.validate import load_playbook_text
from noetl.runtime.local import embedded_runtime

FLAKY = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: flaky}}
workflow:
  - step: call
    tool:
      kind: python
      code: |
        from pathlib import Path
        def main(context, args):
            marker = Path(args["dir"]) / "calls"
            calls = int(marker.read_text()) + 1 if marker.exists() else 1
            marker.write_text(str(calls))
            if calls <= {failures}:
                raise ConnectionError(f"attempt {{calls}}: refused")
            return calls
      args: {{dir: "{dir}"}}
    retry: {{max_attempts: 3, initial_delay: 0.05, jitter: false}}
    result: {{as: calls}}
"""


def run(tmp_path: Path, failures: int) -> tuple[str, dict[str, object], list[str]]:
    text = FLAKY.format(failures=failures, dir=tmp_path)
    playbook = load_playbook_text(text).require()
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=2) as runtime:
        result = runtime.run(playbook)
        events = [e.type for e in runtime.store.load_events(result.execution_id)]
    return result.status.value, dict(result.context), events


def test_a_transient_failure_is_retried_until_it_succeeds(tmp_path: Path) -> None:
    status, context, events = run(tmp_path, failures=2)

    assert status == "ok"
    assert context["calls"] == 3
    assert events.count("retry.started") == 2
    assert events.count("tool.processed") == 3


def test_retries_that_run_out_fail_the_step(tmp_path: Path) -> None:
    status, _, events = run(tmp_path, failures=5)

    assert status == "fail"
    assert events.count("retry.started") == 2
    assert "retry.processed" in events
