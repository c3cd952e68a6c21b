"""`sokoban`: textarena's Sokoban-v0 (6x6 rooms, 3 boxes, 30 turns); `sokoban1`: the same rooms with one box.

The model pushes every box X onto a target O, one bracketed move per turn; boxes can be pushed, never pulled.
Rooms come from textarena's generator (reverse play from a solved room, deadlock-checked); games whose shortest
solution exceeds the turn limit are left out, so every held-out game can be won.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import Any, ClassVar

from tasks.textgames import Layout, TextArenaGameBenchmark

_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = range(6)  # textarena's cell codes
_GLYPHS = {WALL: "#", FLOOR: "_", TARGET: "O", BOX_ON_TARGET: "*", BOX: "X"}
# compact glyph -> (fixed cell, state cell); "+" is the player standing on a target
_FROM_GLYPH = {
    "#": (WALL, WALL),
    "_": (FLOOR, FLOOR),
    "O": (TARGET, TARGET),
    "*": (TARGET, BOX_ON_TARGET),
    "X": (FLOOR, BOX),
    "P": (FLOOR, PLAYER),
    "+": (TARGET, PLAYER),
}
MAX_SEARCH_STATES = 500_000
Cell = tuple[int, int]


Room = tuple[frozenset[Cell], frozenset[Cell], Cell, frozenset[Cell]]  # walls, targets, player, boxes


def _cells(rows: list[str], *codes: int) -> list[Cell]:
    return [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if int(ch) in codes]


def _parse(fixed: list[str], state: list[str]) -> Room:
    return (
        frozenset(_cells(fixed, WALL)),
        frozenset(_cells(fixed, TARGET)),
        _cells(state, PLAYER)[0],
        frozenset(_cells(state, BOX, BOX_ON_TARGET)),
    )


def _move(
    walls: frozenset[Cell], player: Cell, boxes: frozenset[Cell], move: str
) -> tuple[Cell, frozenset[Cell]] | None:
    """Where the player and boxes are after `move`, or None when a wall or a stuck box is in the way."""
    dr, dc = _DELTAS[move]
    step = (player[0] + dr, player[1] + dc)
    if step in walls:
        return None
    if step not in boxes:
        return step, boxes
    pushed = (step[0] + dr, step[1] + dc)
    if pushed in walls or pushed in boxes:
        return None
    return step, (boxes - {step}) | {pushed}


def _shortest(
    walls: frozenset[Cell], targets: frozenset[Cell], player: Cell, boxes: frozenset[Cell]
) -> list[str] | None:
    """Breadth-first over (player, boxes): a shortest winning move list ([] when solved), or None."""
    start = (player, boxes)
    parents: dict[tuple[Cell, frozenset[Cell]], tuple[Any, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        current = queue.popleft()
        if current[1] <= targets:
            plan: list[str] = []
            node = current
            while (link := parents[node]) is not None:
                node, move = link
                plan.append(move)
            return plan[::-1]
        if len(parents) > MAX_SEARCH_STATES:
            return None
        for move in _DELTAS:
            nxt = _move(walls, current[0], current[1], move)
            if nxt is not None and nxt not in parents:
                parents[nxt] = (current, move)
                queue.append(nxt)
    return None


def solve_room(fixed: list[str], state: list[str]) -> list[str] | None:
    """Shortest move sequence that puts every box on a target, in textarena's cell codes (rows of digits)."""
    return _shortest(*_parse(fixed, state))


@lru_cache(maxsize=4096)
def optimal_first_moves(fixed: tuple[str, ...], state: tuple[str, ...]) -> tuple[str, ...]:
    """Every move that starts some shortest solution (a shortest solution is one BFS; each candidate one more)."""
    walls, targets, player, boxes = _parse(list(fixed), list(state))
    plan = _shortest(walls, targets, player, boxes)
    if not plan:
        return ()
    good = []
    for move in _DELTAS:
        nxt = _move(walls, player, boxes, move)
        rest = None if nxt is None else _shortest(walls, targets, *nxt)
        if rest is not None and len(rest) == len(plan) - 1:
            good.append(move)
    return tuple(good)


def rows_from_board(board: list[str]) -> tuple[list[str], list[str]] | None:
    """(fixed, state) digit rows from the compact board's glyphs, or None if it is not a board."""
    fixed, state = [], []
    for line in board:
        if any(ch not in _FROM_GLYPH for ch in line):
            return None
        fixed.append("".join(str(_FROM_GLYPH[ch][0]) for ch in line))
        state.append("".join(str(_FROM_GLYPH[ch][1]) for ch in line))
    if sum(row.count(str(PLAYER)) for row in state) != 1:
        return None
    return fixed, state


class SokobanBenchmark(TextArenaGameBenchmark):
    name = "sokoban"
    description = (
        "Sokoban (textarena, multi-turn): push every box X onto a target O in a 6x6 room; boxes can be pushed, not "
        "pulled. Each turn the model sees the room and replies with one move: [up], [down], [left] or [right]. "
        "Score: success rate over held-out rooms (at most 30 replies each). Train/valid hold an optimal expert's turns."
    )
    header = "Sokoban: push every X onto an O."
    generator_version = 3  # v2: every optimal move of a training turn; v3: no test split on the public seeds
    test_modulus = None  # rooms are too many to collide: the grader's draw excludes train/valid rooms instead
    default_split_sizes: ClassVar[dict[str, int]] = {"test": 100, "valid": 30, "train": 150}
    default_num_boxes: ClassVar[int] = 3
    default_max_turns: ClassVar[int] = 30

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int | None = None,
        max_turns: int | None = None,
        split_sizes: dict[str, int] | None = None,
    ):
        self.dim_room = dim_room
        self.num_boxes = self.default_num_boxes if num_boxes is None else num_boxes
        super().__init__(self.default_max_turns if max_turns is None else max_turns, split_sizes)

    def settings(self) -> dict[str, Any]:
        return {"dim_room": list(self.dim_room), "num_boxes": self.num_boxes, "max_turns": self.max_turns}

    def _raw_env(self) -> Any:
        from textarena.envs.Sokoban.env import SokobanEnv

        return SokobanEnv(dim_room=self.dim_room, max_turns=self.max_turns, num_boxes=self.num_boxes)

    def generate(self, seed: int) -> Layout:
        env = self._raw_env()
        env.reset(num_players=1, seed=seed)
        return {
            "fixed": ["".join(str(int(v)) for v in row) for row in env.room_fixed],
            "state": ["".join(str(int(v)) for v in row) for row in env.room_state],
        }

    def new_env(self, layout: Layout) -> Any:
        import numpy as np
        import textarena as ta

        env = self._raw_env()
        env.room_fixed = np.array([[int(ch) for ch in row] for row in layout["fixed"]])
        env.room_state = np.array([[int(ch) for ch in row] for row in layout["state"]])
        env.box_mapping = {}
        env.player_position = np.argwhere(env.room_state == PLAYER)[0]
        env.state = ta.SinglePlayerState(num_players=1, max_turns=self.max_turns, seed=None)
        env.state.reset(
            game_state={"board": env.create_board_str(env.room_state)},
            player_prompt_function=env._generate_player_prompt,
        )
        env._observe_current_state()
        return env

    def board(self, env: Any) -> str:
        lines = []
        for state_row, fixed_row in zip(env.room_state, env.room_fixed, strict=True):
            glyphs = []
            for cell, under in zip(state_row, fixed_row, strict=True):
                if int(cell) == PLAYER:
                    glyphs.append("+" if int(under) == TARGET else "P")
                else:
                    glyphs.append(_GLYPHS[int(cell)])
            lines.append("".join(glyphs))
        return "\n".join(lines)

    def solve(self, layout: Layout) -> list[str] | None:
        return solve_room(layout["fixed"], layout["state"])

    def optimal_moves(self, env: Any, expert_move: str) -> list[str]:
        rows = [[str(int(v)) for v in row] for row in env.room_state]
        fixed = tuple("".join(str(int(v)) for v in row) for row in env.room_fixed)
        return list(optimal_first_moves(fixed, tuple("".join(row) for row in rows))) or [expert_move]

    def optimal_from_prompt(self, prompt: str) -> list[str]:
        parsed = rows_from_board(self.board_rows(prompt))
        return list(optimal_first_moves(tuple(parsed[0]), tuple(parsed[1]))) if parsed else []


class SokobanOneBoxBenchmark(SokobanBenchmark):
    """`sokoban1`: the same game with one box, short enough that a 0.34M-parameter model learns it in minutes."""

    name = "sokoban1"
    description = (
        "Sokoban with one box (textarena, multi-turn): push the box X onto the target O in a 6x6 room; boxes can be "
        "pushed, not pulled. Each turn the model sees the room and replies with one move: [up], [down], [left] or "
        "[right]. Score: success rate over held-out rooms (at most 20 replies each). Train/valid hold an optimal "
        "expert's turns."
    )
    default_split_sizes: ClassVar[dict[str, int]] = {"test": 200, "valid": 100, "train": 600}
    default_num_boxes: ClassVar[int] = 1
    default_max_turns: ClassVar[int] = 20
