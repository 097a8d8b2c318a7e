"""Upstream NoETL's playbook dialect: recognised per file and read into the same model.

Each playbook here is written the way upstream's users write them (`tool.input`, `auth:`,
`command:`, top-level python code, `next: {spec, arcs}`), small and made up for the test.
"""

from __future__ import annotations

import textwrap

import pytest

from noetl.dsl import load_playbook_text
from noetl.dsl.diagnostics import Severity
from noetl.dsl.kinds import HttpSpec, spec_fields
from noetl.dsl.model import Playbook
from noetl.dsl.validate import LoadResult

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: sample
  path: tests/upstream/sample
"""


def load(body: str, head: str = HEAD) -> LoadResult:
    return load_playbook_text(head + textwrap.dedent(body), "sample.yaml")


def valid(body: str, head: str = HEAD) -> Playbook:
    result = load(body, head)
    assert result.errors == [], [d.format() for d in result.errors]
    assert result.playbook is not None
    return result.playbook


def only_error(body: str, head: str = HEAD) -> str:
    result = load(body, head)
    assert len(result.errors) == 1, [d.format() for d in result.errors]
    return result.errors[0].format()


def test_a_tool_input_marks_the_file_as_upstream_and_becomes_args() -> None:
    playbook = valid("""
        workload:
          message: hi
        workflow:
          - step: start
            tool:
              kind: python
              input:
                message: "{{ message }}"
              code: |
                result = {"echo": message}
        """)
    assert playbook.dialect == "upstream"
    tool = playbook.step("start").tool
    assert tool is not None
    assert tool.args == {"message": "{{ message }}"}
    assert tool.spec["style"] == "toplevel"
    assert tool.spec["code"].startswith("result = ")


def test_lint_names_the_dialect_in_a_note_that_is_not_a_warning() -> None:
    result = load("""
        workflow:
          - step: start
            tool:
              kind: python
              input: {}
              code: |
                result = 1
        """)
    assert result.ok
    assert result.warnings == []
    [note] = result.notes
    assert note.severity is Severity.INFO
    assert note.code == "I001"
    assert "read as upstream NoETL dialect" in note.message
    assert "'input' under tool" in note.message
    assert note.line == 11


def test_a_native_playbook_with_arcs_stays_native() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              spec:
                code: |
                  def main(context, args):
                      return 1
            next:
              spec: {mode: exclusive}
              arcs:
                - step: b
          - step: b
            tool: noop
        """)
    assert playbook.dialect == "native"
    assert load_playbook_text(HEAD + "workflow:\n  - step: a\n    tool: noop\n").notes == []


def test_top_level_python_code_alone_marks_the_file() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                result = {"status": "ok"}
        """)
    assert playbook.dialect == "upstream"


def test_a_file_cannot_set_its_own_dialect() -> None:
    message = only_error("dialect: upstream\nworkflow:\n  - step: a\n    tool: noop\n")
    assert "E100: unknown root key 'dialect'" in message


def test_postgres_auth_and_command() -> None:
    playbook = valid("""
        workload:
          pg_auth: pg_local
        workflow:
          - step: start
            tool:
              kind: postgres
              auth: "{{ workload.pg_auth }}"
              command: |
                CREATE TABLE t (id int);
                INSERT INTO t VALUES (1);
          - step: read
            tool:
              kind: postgres
              auth: pg_local
              query: SELECT 1
        """)
    tool = playbook.step("start").tool
    assert tool is not None
    assert tool.spec["credential"] == "{{ workload.pg_auth }}"
    assert tool.spec["command"].count(";") == 2
    assert "query" not in tool.spec or tool.spec.get("query") is None
    read = playbook.step("read").tool
    assert read is not None
    assert read.spec == {"credential": "pg_local", "command": "SELECT 1"}


def test_duckdb_commands_share_one_database_per_execution() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: duckdb
              commands: |
                CREATE TABLE t AS SELECT 1 AS a;
          - step: other
            tool:
              kind: duckdb
              database: /tmp/x.duckdb
              command: SELECT 1
        """)
    first, other = playbook.step("start").tool, playbook.step("other").tool
    assert first is not None and other is not None
    assert first.spec["database"] == ".noetl/duckdb/{{ execution_id }}.duckdb"
    assert other.spec["database"] == "/tmp/x.duckdb"


def test_python_libs_are_kept_and_checked() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              libs:
                os: os
                pth: os.path
                dt:
                  from: datetime
                  import: date
              code: |
                result = pth.basename("/a/b")
        """)
    tool = playbook.step("start").tool
    assert tool is not None
    assert tool.spec["libs"]["pth"] == "os.path"
    message = only_error("""
        workflow:
          - step: start
            tool:
              kind: python
              libs:
                bad: "not a module"
              code: result = 1
        """)
    assert "libs.bad must name a module" in message


def test_label_values_of_any_scalar_are_read_as_text() -> None:
    head = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: sample\n"
    head += "  labels: {phase: 2, ready: true, name: x}\n"
    playbook = valid(
        """
        workflow:
          - step: start
            tool: {kind: python, input: {}, code: result = 1}
        """,
        head,
    )
    assert playbook.metadata.labels == {"phase": "2", "ready": "true", "name": "x"}


def test_a_list_of_packages_under_libs_is_dropped() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: [psycopg2-binary, requests]
              code: result = 1
        """)
    tool = playbook.step("start").tool
    assert tool is not None
    assert "libs" not in tool.spec


def test_http_keys() -> None:
    playbook = valid("""
        workload:
          api_url: http://127.0.0.1:1
        workflow:
          - step: get
            tool:
              kind: http
              endpoint: "{{ api_url }}/items"
              data: {page: 2}
          - step: post
            tool:
              kind: http
              method: POST
              url: "{{ api_url }}/items"
              data: {name: x}
          - step: split
            tool:
              kind: http
              method: POST
              url: "{{ api_url }}/items"
              data:
                query: {dry_run: true}
                body: {name: y}
          - step: payload
            tool:
              kind: http
              method: PUT
              url: "{{ api_url }}/items/1"
              payload: {name: z}
              verify_ssl: true
          - step: body
            tool:
              kind: http
              method: PATCH
              url: "{{ api_url }}/items/1"
              body: {name: w}
        """)
    specs = {s.step: s.tool.spec for s in playbook.workflow if s.tool is not None}
    assert specs["get"]["url"] == "{{ api_url }}/items"
    assert specs["get"]["params"] == {"page": 2}
    assert specs["post"]["json"] == {"name": "x"}
    assert specs["split"]["params"] == {"dry_run": True}
    assert specs["split"]["json"] == {"name": "y"}
    assert specs["payload"]["json"] == {"name": "z"}
    assert "verify_ssl" not in specs["payload"]
    assert specs["body"]["json"] == {"name": "w"}


def test_http_auth_is_the_credential_once_the_http_tool_takes_one() -> None:
    result = load("""
        workflow:
          - step: start
            tool:
              kind: http
              url: http://127.0.0.1:1/x
              auth: api_token
        """)
    if "credential" in spec_fields(HttpSpec):
        assert result.ok
        assert result.playbook is not None
        tool = result.playbook.step("start").tool
        assert tool is not None and tool.spec["credential"] == "api_token"
    else:
        [error] = result.errors
        assert error.code == "E330"
        assert "http `auth:` credentials" in error.message


def test_metadata_and_root_keys_upstream_writes_are_read_and_ignored() -> None:
    head = HEAD + "  tags: [a, b]\n  exposes_as_mcp: true\n  version: '2.0'\n"
    playbook = valid(
        """
        keychain:
          - name: token
            kind: bearer
        executor:
          profile: auto
        tracing:
          enabled: true
        workflow:
          - step: start
            tool: noop
        """,
        head,
    )
    assert playbook.dialect == "upstream"
    assert playbook.metadata.path == "tests/upstream/sample"
    assert playbook.metadata.version == "2.0"


def test_a_step_without_next_ends_its_branch_at_end() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              code: result = 1
            next:
              spec: {mode: exclusive}
              arcs:
                - step: middle
          - step: middle
            desc: no next here
            tool:
              kind: python
              code: result = 2
          - step: end
            desc: the end
        """)
    assert [e.step for e in playbook.step("middle").edges] == ["end"]
    assert playbook.step("end").next is None
    assert [e.step for e in playbook.step("start").edges] == ["middle"]


def test_without_an_end_step_a_step_without_next_is_terminal() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              code: result = 1
        """)
    assert playbook.step("start").next is None


def test_loop_keys_templated_in_upstream_only() -> None:
    playbook = valid("""
        workload:
          items: [1, 2]
          width: 3
        workflow:
          - step: start
            loop:
              in: "{{ items }}"
              iterator: it
              spec:
                mode: "{{ 'parallel' }}"
                max_in_flight: "{{ width }}"
                policy: {exec: distributed}
            tool:
              kind: python
              input: {n: "{{ it }}"}
              code: result = n
        """)
    loop = playbook.step("start").loop
    assert loop is not None
    assert (loop.collection, loop.element) == ("{{ items }}", "it")
    assert (loop.mode, loop.max_concurrency) == ("{{ 'parallel' }}", "{{ width }}")
    native = load_playbook_text(
        HEAD
        + textwrap.dedent("""
            workflow:
              - step: start
                loop: {collection: [1], max_concurrency: "{{ n }}"}
                tool: noop
            """),
        "native.yaml",
    )
    [error] = native.errors
    assert error.code == "E102" and "max_concurrency" in error.message


def test_a_loop_results_policy_of_preserved_order_is_what_this_engine_does() -> None:
    body = """
        workflow:
          - step: start
            loop:
              in: "{{ [1, 2] }}"
              iterator: it
              spec:
                policy: {exec: distributed, results: {preserve_order: true}}
            tool: {kind: python, input: {n: "{{ it }}"}, code: result = n}
        """
    assert valid(body).step("start").loop is not None
    refused = load(body.replace("preserve_order: true", "keep: last"))
    [error] = refused.errors
    assert error.code == "E330" and "results.preserve_order" in error.message


def test_upstream_retry_keys() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: http
              url: http://127.0.0.1:1/x
              retry:
                max_attempts: 3
                retry_on: [timeout, connection_error]
                retry_on_status: [503, 429]
                backoff_seconds: 2
        """)
    tool = playbook.step("start").tool
    assert tool is not None and tool.retry is not None
    assert tool.retry.max_attempts == 3
    assert tool.retry.initial_delay == 2
    assert tool.retry.retry_when == "{{ status_code in [429, 503] }}"


def test_playbook_step_input_noop_result_and_arc_cond() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: playbook
              path: tests/child
              payload: {x: 1}
              timeout: 30
            next:
              spec: {mode: exclusive}
              arcs:
                - step: marked
                  cond: "x == 1"
          - step: marked
            input:
              given: "{{ start }}"
            tool:
              kind: python
              code: result = given
            next:
              spec: {mode: exclusive}
              arcs:
                - step: last
          - step: last
            tool:
              - name: only_task
                kind: noop
                result:
                  marker: ran
        """)
    start = playbook.step("start")
    assert start.tool is not None
    assert start.tool.args == {"x": 1}
    assert start.tool.timeout_ms == 30_000
    assert start.edges[0].when == "{{ x == 1 }}"
    marked = playbook.step("marked").tool
    assert marked is not None
    assert marked.args == {"given": "{{ start }}"}
    last = playbook.step("last").tool
    assert last is not None
    assert (last.kind, last.args) == ("noop", {"marker": "ran"})


def test_a_model_read_back_from_json_keeps_its_dialect() -> None:
    playbook = valid("""
        workflow:
          - step: start
            loop:
              in: [1]
              iterator: i
              spec: {max_in_flight: "{{ 2 }}"}
            tool:
              kind: python
              code: result = 1
        """)
    again = Playbook.model_validate_json(playbook.model_dump_json(by_alias=True))
    assert again.dialect == "upstream"
    assert again == playbook
    assert "dialect" not in Playbook.model_json_schema()["properties"]


# --- one clear error for what is not supported --------------------------------------------


def test_ctx_variables_and_set_are_read() -> None:
    playbook = valid("""
        workflow:
          - step: start
            tool:
              kind: python
              code: result = 1
            set:
              ctx.count: "{{ start }}"
            next:
              spec: {mode: exclusive}
              arcs:
                - step: second
                  set: {ctx.again: "{{ ctx.count }}", plain: 1}
          - step: second
            tool:
              kind: python
              input: {n: "{{ ctx.count }}", m: "{{ iter.x | default(0) }}"}
              code: result = n
        """)
    assert playbook.step("start").set == {"ctx.count": "{{ start }}"}
    assert playbook.step("start").edges[0].set == {"ctx.again": "{{ ctx.count }}", "plain": 1}


def test_a_tool_kind_this_engine_does_not_have_is_one_error_naming_it() -> None:
    result = load("""
        workflow:
          - step: start
            tool:
              kind: snowflake
              auth: sf
              command: SELECT 1
          - step: next_one
            tool:
              kind: shell
              cmds: ["echo hi"]
        """)
    [error] = result.errors
    assert error.code == "E331"
    assert "tool kind 'snowflake' (line 10)" in error.message
    assert "tool kind 'shell' (line 15)" in error.message
    assert "runs SQL on Snowflake" in error.message
    assert "`noetl.tools` group" in error.message


def test_a_typo_in_a_kind_is_still_the_usual_error() -> None:
    result = load("""
        workflow:
          - step: start
            tool:
              kind: pyhton
              input: {}
              code: result = 1
        """)
    [error] = result.errors
    assert error.code == "E304"
    assert "did you mean 'python'" in error.message


# --- python code checks ------------------------------------------------------------------


def test_top_level_return_is_accepted_and_syntax_errors_keep_their_yaml_line() -> None:
    valid("""
        workflow:
          - step: start
            tool:
              kind: python
              input: {n: 1}
              code: |
                if n > 0:
                    return {"positive": True}
                return {"positive": False}
        """)
    result = load("""
        workflow:
          - step: start
            tool:
              kind: python
              input: {n: 1}
              code: |
                x = 1
                return x +
        """)
    [error] = result.errors
    assert error.code == "E312"
    assert error.line == 14
    assert "(code line 2)" in error.message


def test_templates_in_upstream_code_are_rendered_so_they_do_not_warn() -> None:
    result = load("""
        workload:
          size: 3
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                result = {"size": {{ size }}}
        """)
    assert result.ok
    assert [d.code for d in result.warnings] == []


def test_native_code_keeps_its_checks() -> None:
    result = load("""
        workflow:
          - step: start
            tool:
              kind: python
              spec:
                code: |
                  def main(context, args):
                      return {{ workload.n }}
        """)
    assert result.ok
    assert [d.code for d in result.warnings] == ["W412"]
    assert result.notes == []


@pytest.mark.parametrize("bad", ["input: {}\n      args: {}", "spec: {input: {}}\n      input: {}"])
def test_a_key_given_twice_is_an_error(bad: str) -> None:
    result = load(f"""
workflow:
  - step: start
    tool:
      kind: python
      {bad}
      code: result = 1
""")
    assert [d.code for d in result.errors] == ["E200"]


def test_a_root_spec_block_is_named_as_unsupported() -> None:
    result = load("""
        spec:
          state: ready
        workflow:
          - step: start
            tool: {kind: python, input: {}, code: "result = 1"}
            next:
              arcs:
                - step: end
                  when: "{{ spec.state == 'ready' }}"
                  set: {ctx.state: "{{ spec.state }}"}
          - step: end
            tool: {kind: python, code: "result = 1"}
        """)
    [error] = result.errors
    assert error.code == "E330"
    assert error.line == 7
    assert "a root `spec:` block (an older form; use `workload`) (line 7)" in error.message
