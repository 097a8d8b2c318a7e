"""The environment templates are rendered in: the sandbox with a step budget and size checks.

Everything a compiled template does passes through a hook here, which takes steps from the
render's budget (`noetl.dsl.template_limits`) and checks what would be built before building it:

* the sandbox's own hooks: `call` (a str method that can grow, such as `center`, `replace`,
  `join` or `expandtabs`, is estimated first; `int.to_bytes` too), `getattr` and
  `getitem`, and every arithmetic operator (`call_binop`: `*` and `**` on integers are
  estimated in bits, repetition and concatenation in characters, `%` formatting by its
  widths); `str.format` is wrapped where the sandbox wraps it;
* filters and tests (`noetl.dsl.filters`), which compiled templates call directly;
* the template's tree, rewritten before it is compiled (`_Rewriter`): each `for` loop's
  iterable takes a step per item, each piece of output (captured blocks and macros too)
  is counted against the output limit, `~` concatenation is measured before it joins,
  list, tuple and map literals are measured as they are built, and the operands of a
  comparison are measured before they are compared.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, Undefined, nodes, pass_context
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.visitor import NodeTransformer

from noetl.dsl import filters, growth
from noetl.dsl.template_limits import (
    MAX_INT_BITS,
    MAX_RANGE,
    Budget,
    current,
    int_bits_of_power,
    int_bits_of_product,
    int_too_big,
    ticking,
    too_big,
)
from noetl.dsl.templates import TemplateEnvironment
from noetl.errors import TemplateError

_OUT, _ITER, _CONCAT, _BUILT, _OPERAND = (
    "_noetl_out",
    "_noetl_iter",
    "_noetl_concat",
    "_noetl_built",
    "_noetl_operand",
)
_SEQUENCES = (str, bytes, list, tuple)
# Calling a macro sets up a new scope and output buffer: about as much work as ten steps.
_MACRO_STEPS = 10


class LimitedEnvironment(TemplateEnvironment):
    """`TemplateEnvironment` under the budget of the render in progress."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined)
        self.globals.pop("lipsum", None)  # random text, as long as asked
        self.globals["range"] = _range
        filters.wrap_all(self.filters, self.tests)
        self.filters.update(
            {_OUT: _out, _ITER: _iter, _CONCAT: _concat, _BUILT: _built, _OPERAND: _operand}
        )

    def _generate(
        self,
        source: nodes.Template,
        name: str | None,
        filename: str | None,
        defer_init: bool = False,
    ) -> str:
        # Jinja's hook between parsing and compiling: every template, and every expression
        # (`compile_expression`), is rewritten here, whichever way it was compiled.
        tree = _Rewriter().visit(source)
        tree.set_environment(self)
        return super()._generate(tree, name, filename, defer_init=defer_init)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = current()
        if budget is None:
            return super().call(context, obj, *args, **kwargs)
        # A method scans its subject too (`text.count('x')` reads all of `text`).
        subject = getattr(obj, "__self__", None)
        budget.tick()
        budget.charge(_scanned((subject, *args)) + _scanned(tuple(kwargs.values())))
        if isinstance(obj, Macro):
            budget.tick(_MACRO_STEPS)
        elif isinstance(obj, LoopContext) and args:
            args = (ticking(args[0]), *args[1:])  # `loop(children)` in a recursive loop
        args = _check_method(budget, obj, args, kwargs)
        result = super().call(context, obj, *args, **kwargs)
        return _built_result(budget, result)

    def getattr(self, obj: Any, attribute: str) -> Any:
        budget = current()
        if budget is not None:
            budget.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        budget = current()
        if budget is None:
            return super().getitem(obj, argument)
        budget.tick()
        result = super().getitem(obj, argument)
        if isinstance(argument, slice) and isinstance(result, _SEQUENCES):
            budget.charge(len(result) * (1 if isinstance(result, str | bytes) else 8))
        return result

    def call_binop(self, context: Context, operator_name: str, left: Any, right: Any) -> Any:
        budget = current()
        if budget is None:
            return self.binop_table[operator_name](left, right)
        budget.tick()
        _check_binop(budget, operator_name, left, right)
        return _built_result(budget, self.binop_table[operator_name](left, right))

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__
        is_map = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            budget = current()
            if budget is not None:
                budget.charge(len(fmt))  # the format is parsed whatever it builds
                named = args[0] if is_map and args and isinstance(args[0], Mapping) else kwargs
                positional = () if is_map else args
                if growth.str_format(budget, fmt, positional, named) > budget.max_output:
                    raise TemplateError(too_big(budget.max_output))
            result: str = wrapped(*args, **kwargs)
            if budget is not None:
                budget.built(len(result))
            return result

        return checked


# --- the sandbox's hooks ----------------------------------------------------------------


def _scanned(values: tuple[Any, ...]) -> int:
    total = 0
    for value in values:
        if isinstance(value, str | bytes):
            total += len(value)
        elif isinstance(value, list | tuple | dict | set | frozenset):
            total += 8 * len(value)
    return total


def _check_method(
    budget: Budget, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """Estimate a str or bytes method (or `int.to_bytes`) that can build far more than its
    inputs; returns the arguments to call it with (the items of a `join`, listed)."""
    subject = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(subject, str | bytes | bytearray):
        if name == "striptags" and isinstance(subject, str):  # a Markup's (`x|safe`)
            budget.tick(growth.striptags_steps(subject))
        estimate = growth.METHODS.get(name)
    elif isinstance(subject, int) and not isinstance(subject, bool):
        estimate = growth.INT_METHODS.get(name)
    else:
        return args
    if estimate is None:
        return args
    if name == "join" and args and not isinstance(args[0], list | tuple):
        args = (list(ticking(args[0])), *args[1:])
    if estimate(subject, args, kwargs) > budget.max_output:
        raise TemplateError(too_big(budget.max_output))
    return args


def _built_result(budget: Budget, result: Any) -> Any:
    """Charge what an operation built: text by its length (refused over the limit), a
    list or tuple by its elements; an integer must stay under its limit."""
    if isinstance(result, str | bytes):
        budget.built(len(result))
    elif isinstance(result, list | tuple):
        budget.charge(8 * len(result))
    elif isinstance(result, int) and not isinstance(result, bool):
        budget.integer(result)
    return result


def _check_binop(budget: Budget, name: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be over a limit, before computing it."""
    ints = isinstance(left, int) and isinstance(right, int)
    if name == "**" and ints:
        if int_bits_of_power(left, right) > MAX_INT_BITS:
            raise TemplateError(int_too_big())
    elif name == "*":
        if ints:
            if int_bits_of_product(left, right) > MAX_INT_BITS:
                raise TemplateError(int_too_big())
            return
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, _SEQUENCES) and isinstance(count, int) and count > 0:
                size = len(seq) if isinstance(seq, str | bytes) else budget.value_ok(seq).chars
                budget.fits(size * count)
    elif name == "+" and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        if isinstance(left, str | bytes) and isinstance(right, str | bytes):
            budget.fits(len(left) + len(right))
        else:
            budget.fits(budget.value_ok(left).chars + budget.value_ok(right).chars)
    elif name == "%" and isinstance(left, str):
        budget.charge(len(left))  # the format is parsed whatever it builds
        if growth.percent(budget, left, right) > budget.max_output:
            raise TemplateError(too_big(budget.max_output))


def _range(*args: Any) -> Iterator[int]:
    """`range()` in templates: at most `MAX_RANGE` items, a step each."""
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise TemplateError(f"range() of {len(numbers)} items is over the limit of {MAX_RANGE}")
    return ticking(numbers)


# --- the helpers the rewritten tree calls -----------------------------------------------


@pass_context
def _out(context: Context, value: Any) -> str:
    """One piece of output (literal text or an expression's value), as text, counted."""
    budget = current()
    if isinstance(value, str):
        text = value
    else:
        if isinstance(value, Undefined):
            str(value)  # StrictUndefined: raises UndefinedError with the name
        if budget is not None:
            budget.printable(value)
        _no_nested_undefined(value)
        text = str(value)
    if budget is not None:
        budget.write(len(text))
    return text


@pass_context
def _iter(context: Context, iterable: Any) -> Iterator[Any]:
    """A `for` loop's iterable, a step per item."""
    return ticking(iterable)


@pass_context
def _concat(context: Context, parts: list[Any]) -> str:
    """`a ~ b ~ c`, measured before it is joined."""
    budget = current()
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if isinstance(part, Undefined):
            str(part)
        if budget is not None:
            budget.text_ok(part)
        texts.append(str(part))
    if budget is not None:
        budget.built(sum(len(t) for t in texts))
    return "".join(texts)


@pass_context
def _built(context: Context, value: Any) -> Any:
    """A list, tuple or map literal, measured as it is built."""
    budget = current()
    if budget is not None:
        budget.value_ok(value)
    return value


@pass_context
def _operand(context: Context, value: Any) -> Any:
    """An operand of a comparison (`==`, `<`, `in`, ...), measured before it is compared."""
    budget = current()
    if budget is not None:
        if isinstance(value, list | tuple | dict):
            budget.value_ok(value)
        elif isinstance(value, str | bytes):
            budget.charge(len(value))  # `in` and `==` read the text
        else:
            budget.tick()
    return value


def _no_nested_undefined(value: Any) -> None:
    """An undefined name inside a list or map printed in text is an error (printing the
    container would show `Undefined` instead of raising)."""
    if isinstance(value, Mapping):
        items: Any = (*value.keys(), *value.values())
    elif isinstance(value, list | tuple):
        items = value
    else:
        return
    for item in items:
        kind = type(item)
        if kind is str or kind is int or kind is float or kind is bool or item is None:
            continue
        if isinstance(item, Undefined):
            str(item)  # StrictUndefined: raises UndefinedError with the name
        _no_nested_undefined(item)


# --- the tree rewrite -------------------------------------------------------------------


def _filter(node: nodes.Node, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


class _Rewriter(NodeTransformer):
    """Routes loops, output, concatenation, literals and comparisons through the helpers."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _filter(node.iter, _ITER)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [
            _filter(nodes.Const(child.data, lineno=child.lineno), _OUT)
            if isinstance(child, nodes.TemplateData)
            else _filter(child, _OUT)
            for child in node.nodes
        ]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _filter(nodes.List(node.nodes, lineno=node.lineno), _CONCAT)

    def visit_List(self, node: nodes.List) -> nodes.Node:
        self.generic_visit(node)
        return _filter(node, _BUILT)

    def visit_Dict(self, node: nodes.Dict) -> nodes.Node:
        self.generic_visit(node)
        return _filter(node, _BUILT)

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        self.generic_visit(node)
        return node if node.ctx != "load" else _filter(node, _BUILT)

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        self.generic_visit(node)
        node.expr = _filter(node.expr, _OPERAND)
        for operand in node.ops:
            operand.expr = _filter(operand.expr, _OPERAND)
        return node
