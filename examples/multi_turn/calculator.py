"""The calculator tool of the multi-turn examples, standard library only: what
calculator_generate.py (a generate function) and examples/agent's agents (programs of their own)
answer a policy's <calc>EXPR</calc> with.

EXPR is integers, + - * /, unary minus and parentheses; the value is exact:
    <result>14</result>          7/2 answers 7/2, not 3 or 3.5
    <result>error: division by zero</result>
"""

import ast
from fractions import Fraction

CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
# What the evaluator accepts, so that a policy cannot make the tool slow.
MAX_EXPRESSION_LENGTH = 256
MAX_NESTING = 32
_OPERATORS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__,
              ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}


class CalcError(Exception):
    pass


def _value(node, depth=0) -> Fraction:
    if depth > MAX_NESTING:
        raise CalcError(f"nested too deeply (at most {MAX_NESTING} levels)")
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.Div) and right == 0:
            raise CalcError("division by zero")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _value(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    raise CalcError("only integers, + - * /, and parentheses")


def evaluate(expression: str) -> Fraction:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CalcError(f"expression too long ({len(expression)} characters; "
                        f"at most {MAX_EXPRESSION_LENGTH})")
    if not expression.strip():
        raise CalcError("empty expression")
    if any(c not in "0123456789+-*/() \t\r\n" for c in expression):
        raise CalcError("only integers, + - * /, and parentheses")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalcError("not an expression") from None
    return _value(tree.body)


def tool_answer(expression: str) -> str:
    """The observation the policy sees for <calc>expression</calc>."""
    try:
        value = evaluate(expression)
    except CalcError as error:
        return f"<result>error: {error}</result>"
    text = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return f"<result>{text}</result>"


def find_tool_call(text: str):
    """The expression of the first complete <calc>EXPR</calc> in text, or None."""
    start = text.find(CALL_OPEN)
    if start < 0:
        return None
    end = text.find(CALL_CLOSE, start + len(CALL_OPEN))
    return None if end < 0 else text[start + len(CALL_OPEN):end]
