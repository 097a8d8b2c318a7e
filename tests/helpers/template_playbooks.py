"""Playbooks whose templates would hold a process, and playbooks that name data like dict
methods: shared by the embedded (`noetl run`) and the distributed tests."""

from __future__ import annotations

import json
from typing import Any

INT = "template builds an integer over the limit of 4300 digits"
SIZE = "template builds a value over the limit of 1000000 characters"
STEPS = (
    "template went over the limit of 1000000 steps (operations, loop iterations and output count)"
)

# Each step's args hold one template that, before the render limits, held the process for
# minutes or allocated gigabytes; the error each step must fail with.
RUNAWAYS: dict[str, tuple[str, str]] = {
    "pow": ("{{ (10 ** 10000) ** 10000 }}", INT),
    "center": ("{{ 'x'.center(2000000000) }}", SIZE),
    "repeat": ("{{ 'x' * 10**9 }}", SIZE),
    "loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        STEPS,
    ),
    "doubling": (
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        SIZE,
    ),
    "fmt": ("{{ '{:>2000000000}'.format(1) }}", SIZE),
    "pct": ("{{ '%2000000000s' % 1 }}", SIZE),
    "replace_chain": (
        "{{ ('x' * 1000) | replace('x', 'y' * 1000) | replace('y', 'z' * 1000) }}",
        SIZE,
    ),
    "tojson_refs": (
        "{{ ([{}] * 2000) | map(attribute='x', default='x' * 100000) | list | tojson }}",
        SIZE,
    ),
}


def runaway_playbook(name: str = "runaway_templates") -> str:
    """The entry step (no tool) calls every runaway step at once, so all of them are
    rendered in the decision that starts the execution (on a server: in the API request).
    `on_step_fail: continue` lets each of them fail on its own."""
    steps = [
        "  - step: start",
        f"    next: {json.dumps(list(RUNAWAYS))}",
    ]
    for step, (template, _) in RUNAWAYS.items():
        steps += [
            f"  - step: {step}",
            f"    tool: {{kind: noop, args: {{v: {json.dumps(template)}}}}}",
        ]
    return (
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        f"metadata: {{name: {name}}}\n"
        "policy: {on_step_fail: continue}\n"
        "workflow:\n" + "\n".join(steps) + "\n"
    )


def runaway_errors() -> dict[str, str]:
    return {step: f"tool: args.v: {message}" for step, (_, message) in RUNAWAYS.items()}


WAIT_THEN_FAIL = """\
import os
import time
def main(context, args):
    open(args["started"], "w").close()
    while not os.path.exists(args["go"]):
        time.sleep(0.05)
    raise ValueError("planned failure")
"""


def runaway_after_failure_playbook() -> str:
    """`start` waits for a file, then fails; its failure edge calls `bomb`, whose args
    hold `(10 ** 10000) ** 10000`. A failure is decided by a server (never a worker's
    continuation), so on a server it is the orchestrator that renders `bomb`."""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: runaway_after_failure}}
workflow:
  - step: start
    tool:
      kind: python
      code: {json.dumps(WAIT_THEN_FAIL)}
      args: {{started: "{{{{ workload.started }}}}", go: "{{{{ workload.go }}}}"}}
    retry: false
    next:
      - {{step: bomb, when: "{{{{ fail('start') }}}}"}}
  - step: bomb
    tool: {{kind: noop, args: {{v: "{{{{ (10 ** 10000) ** 10000 }}}}"}}}}
"""


QUICK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: quick}
workflow:
  - step: start
    tool:
      kind: python
      code: "def main(context, args):\\n    return {'n': args['n'] + 1}\\n"
      args: {n: "{{ workload.n }}"}
    result: {as: first}
    next: second
  - step: second
    tool:
      kind: python
      code: "def main(context, args):\\n    return {'n': args['n'] * 2}\\n"
      args: {n: "{{ first.n }}"}
    result: {as: second}
"""

# --- data before attributes ---------------------------------------------------------------

DATA_WORKLOAD: dict[str, Any] = {
    "items": [{"values": 1, "keys": "a"}, {"values": 2, "keys": "b"}],
    "keys": {"update": 1},
    "values": {"keys": "K"},
    "get": "g",
    "pop": "P",
    "copy": [1],
    "update": "u",
}

# A python tool returns a result whose fields are named like dict methods too.
RESULT_CODE = """\
def main(context, args):
    return {
        "items": args["items"],
        "keys": args["values"]["keys"],
        "values": [i["values"] for i in args["items"]],
        "get": args["pop"],
        "update": args["n"],
        "pop": args["update"],
        "copy": args["cp"],
    }
"""


def data_first_playbook(out_dir: str) -> str:
    """Keys named `items`, `keys`, `values`, `get`, `update`, `pop`, `copy` (in the
    workload and in results) read as data in a gate, bind, args, a sink's spec and args
    (rendered on the worker), pick, a loop collection, an edge, and a case condition."""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: data_first}}
workflow:
  - step: start
    when: "{{{{ workload.get == 'g' and workload.keys.update == 1 }}}}"
    bind: {{n: "{{{{ workload.items | length }}}}", cp: "{{{{ workload.copy }}}}"}}
    tool:
      kind: python
      code: {json.dumps(RESULT_CODE)}
      args:
        items: "{{{{ workload.items }}}}"
        values: "{{{{ workload.values }}}}"
        pop: "{{{{ workload.pop }}}}"
        update: "{{{{ workload.update }}}}"
        n: "{{{{ n }}}}"
        cp: "{{{{ cp }}}}"
    result:
      pick: "{{{{ {{'items': this.items, 'keys': this.keys, 'get': this.get,
        'values': this.values, 'update': this.update, 'pop': this.pop,
        'copy': this.copy}} }}}}"
      as: res
      sink:
        - file:
            path: "{out_dir}/{{{{ workload.values.keys }}}}-{{{{ workload.items | length }}}}.json"
            args: {{items: "{{{{ out.items }}}}", keys: "{{{{ this.keys }}}}",
                    get: "{{{{ out.get }}}}", values: "{{{{ this.values }}}}"}}
    next:
      - {{step: each, when: "{{{{ res.items | length == 2 and res.get == 'P' }}}}"}}
  - step: each
    loop: {{collection: "{{{{ res.items }}}}", element: it}}
    tool: {{kind: noop, args: {{v: "{{{{ it.values }}}}", k: "{{{{ it.keys }}}}"}}}}
    result: {{as: looped}}
    next: decide
  - step: decide
    case:
      - when: "{{{{ res.keys == 'K' and res.update == 2 and looped[1].v == 2 }}}}"
        then:
          set: {{chosen: "{{{{ res.get }}}}", copied: "{{{{ res.copy }}}}",
                 popped: "{{{{ res.pop }}}}", summed: "{{{{ res.values | sum }}}}"}}
"""


DATA_CONTEXT = {
    "res": {
        "items": DATA_WORKLOAD["items"],
        "keys": "K",
        "get": "P",
        "values": [1, 2],
        "update": 2,
        "pop": "u",
        "copy": [1],
    },
    "looped": [{"v": 1, "k": "a"}, {"v": 2, "k": "b"}],
    "chosen": "P",
    "copied": [1],
    "popped": "u",
    "summed": 3,
}
DATA_SINK_FILE = "K-2.json"
DATA_SINK_BODY = {"items": DATA_WORKLOAD["items"], "keys": "K", "get": "P", "values": [1, 2]}
