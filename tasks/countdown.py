"""`countdown`: reach a target number from given numbers with + - * / and parentheses.

Problems are solvable by construction (a reference expression is kept as the answer). Train and valid come from fixed
public seeds and never hold a problem reserved for test (1 in `TEST_MODULUS` by a hash of its numbers and target);
the grader draws its hidden test split from that reserve with a secret seed. The completion's expression is parsed with `ast` (never `eval`): only integers, + - * / and parentheses
are accepted, each given number may be used at most once, and the exact (fractional) value must equal the target.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from fractions import Fraction
from functools import lru_cache
from typing import Any

from tasks.base import Sample, Split, draw_public_splits, public_split, reserved_for_test

SPLIT_SIZES: dict[str, int] = {"test": 500, "valid": 200, "train": 10000}
SPLIT_SEEDS: dict[str, int] = {"valid": 7_000_003, "train": 7_000_019}
TEST_MODULUS = 5
MAX_EXPRESSION_CHARS = 200
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class ExpressionError(ValueError):
    """The completion does not hold an acceptable arithmetic expression."""


def _value(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, used), _value(node.right, used)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise ExpressionError("division by zero")
        return left / right
    raise ExpressionError(f"{type(node).__name__} is not allowed; use integers, + - * / and parentheses")


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]]:
    """Exact value of an arithmetic expression and the integers it uses, parsed safely with `ast`."""
    text = expression.strip()
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError("expression is empty or too long")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ExpressionError("not a valid expression") from None
    used: list[int] = []
    return _value(tree.body, used), used


def candidate_expression(completion: str) -> str:
    """The one expression a completion commits to: inside <answer>...</answer>, else its first line, before '='."""
    tagged = _ANSWER_TAG.findall(completion)
    text = tagged[-1] if tagged else completion.strip().split("\n", 1)[0]
    return text.split("=", 1)[0].strip()


def check_solution(completion: str, numbers: list[int], target: int) -> bool:
    """True when the completion's expression uses only the given numbers (each at most once) and equals target."""
    try:
        value, used = evaluate_expression(candidate_expression(completion))
    except ExpressionError:
        return False
    if Counter(used) - Counter(numbers):
        return False
    return value == target


def _problem(rng: random.Random) -> tuple[list[int], int, str]:
    """Numbers, a reachable positive integer target and the expression reaching it."""
    while True:
        count = rng.choice((3, 4))
        numbers = [rng.randint(1, 25) for _ in range(count)]
        exprs: list[tuple[str, Fraction]] = [(str(n), Fraction(n)) for n in numbers]
        rng.shuffle(exprs)
        expr, value = exprs[0]
        for other, other_value in exprs[1:]:
            op = rng.choice("+-*/")
            if op == "/" and (other_value == 0 or (value / other_value).denominator != 1):
                op = "+"
            expr = f"({expr} {op} {other})" if op in "+-" else f"{expr} {op} {other}"
            value = {"+": value + other_value, "-": value - other_value, "*": value * other_value}.get(
                op, value / other_value if other_value else value
            )
        if value.denominator == 1 and 1 <= value <= 1000:
            if expr.startswith("(") and expr.endswith(")"):
                inner = expr[1:-1]
                if _balanced(inner):
                    expr = inner
            return numbers, int(value), expr


def _balanced(text: str) -> bool:
    depth = 0
    for c in text:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def problem_key(numbers: list[int], target: int) -> str:
    """What makes two problems the same: the numbers (in any order) and the target."""
    return f"{' '.join(str(n) for n in sorted(numbers))}|{target}"


def is_test_candidate(numbers: list[int], target: int) -> bool:
    return reserved_for_test("countdown", problem_key(numbers, target), TEST_MODULUS)


def make_sample(split: str, index: int, numbers: list[int], target: int, expr: str) -> Sample:
    return Sample(
        id=f"countdown-{split}-{index}",
        prompt=_prompt(numbers, target),
        answer=expr,
        meta={"numbers": " ".join(str(n) for n in numbers), "target": target},
    )


def _prompt(numbers: list[int], target: int) -> str:
    shown = ", ".join(str(n) for n in numbers)
    return (
        f"Using the numbers [{shown}], write an expression that equals {target}. "
        "Use + - * / and parentheses, each number at most once.\nExpression:"
    )


@lru_cache(maxsize=1)
def _splits() -> dict[str, list[Sample]]:
    return draw_public_splits(
        SPLIT_SEEDS,
        SPLIT_SIZES,
        _problem,
        key=lambda problem: problem_key(problem[0], problem[1]),
        reserved=lambda problem: is_test_candidate(problem[0], problem[1]),
        sample=lambda split, index, problem: make_sample(split, index, *problem),
    )


class CountdownBenchmark:
    """Countdown numbers game; the answer is any valid expression, not only the reference one."""

    name = "countdown"
    description = (
        "Countdown: given 3-4 numbers (1-25) and a target, write one expression with + - * / and parentheses "
        "that equals the target, using each number at most once (e.g. 'Expression: (3 + 5) * 4'). "
        "Score: the expression (first line, or inside <answer></answer>) is parsed and checked exactly."
    )
    max_new_tokens = 48
    stop = ["\n"]

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        return list(_splits()[split])

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """Countdown datasets' own form (as TinyZero's): `nums`, `target`, and one reference `solution`."""
        return [
            {
                "nums": [int(n) for n in str(s.meta["numbers"]).split()],
                "target": int(s.meta["target"]),
                "solution": s.answer,
            }
            for s in self.load(split)
        ]

    def score(self, completion: str, sample: Sample) -> float:
        numbers = [int(n) for n in str(sample.meta["numbers"]).split()]
        return 1.0 if check_solution(completion, numbers, int(sample.meta["target"])) else 0.0
